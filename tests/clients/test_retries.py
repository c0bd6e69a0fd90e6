"""The client's retries and deadlines, against a scripted gRPC server that answers what a real
one would after a lost reply or while it hangs, which a healthy control plane cannot be made to."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from clients import AsyncClient, Client, DeadlineExceededError, GpucloudError, InvalidValueError, NotFoundError
from clients.async_client import RetryPolicy
from gpucloud.v1 import allocation_pb2, node_pb2
from tests.clients.scripted_server import Behaviour, Start

DELETE = "google.longrunning.Operations/DeleteOperation"
CREATE = "gpucloud.v1.AllocationService/CreateAllocation"
CREATE_TENANT = "gpucloud.v1.TenantService/CreateTenant"
FAST = RetryPolicy(attempts=3, initial_backoff=0.001, max_backoff=0.001)


def _answers(*codes: grpc.StatusCode | None) -> tuple[Behaviour, list[bytes]]:
    """A behaviour that aborts with each code in turn (None: succeeds), and the requests it saw."""
    seen: list[bytes] = []

    async def behaviour(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        seen.append(request)
        code = codes[min(len(seen), len(codes)) - 1]
        if code is not None:
            await context.abort(code, f"scripted {code.name}")
        return empty_pb2.Empty().SerializeToString()

    return behaviour, seen


async def test_a_retried_delete_that_finds_the_operation_gone_counts_as_deleted(
    scripted: Start,
) -> None:
    """The first try deleted it but its reply was lost (UNAVAILABLE); the retry's NOT_FOUND is success."""
    behaviour, seen = _answers(grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND)
    async with AsyncClient(await scripted({DELETE: behaviour}), "token", retry=FAST) as client:
        await client.delete_operation("operations/op-1")
    assert [operations_pb2.DeleteOperationRequest.FromString(r).name for r in seen] == ["operations/op-1"] * 2


async def test_a_call_the_server_drops_as_it_stops_is_retried(scripted: Start) -> None:
    """A server that begins a graceful stop drops calls that reach it then, unrun, with CANCELLED:
    on a call safe to repeat that is retried like UNAVAILABLE, instead of failing the caller."""
    behaviour, seen = _answers(grpc.StatusCode.CANCELLED, None)
    async with AsyncClient(await scripted({DELETE: behaviour}), "token", retry=FAST) as client:
        await client.delete_operation("operations/op-1")
    assert len(seen) == 2


async def test_a_create_the_server_drops_as_it_stops_is_retried_with_its_key(scripted: Start) -> None:
    seen: list[allocation_pb2.CreateAllocationRequest] = []

    async def behaviour(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        seen.append(allocation_pb2.CreateAllocationRequest.FromString(request))
        if len(seen) == 1:
            await context.abort(grpc.StatusCode.CANCELLED, "scripted CANCELLED")
        allocation = allocation_pb2.Allocation(
            allocation_id="alloc-1",
            tenant_id="acme",
            gpu_model=node_pb2.GPU_MODEL_H100,
            node_count=1,
            state=allocation_pb2.ALLOCATION_STATE_ACTIVE,
            node_ids=["node-000"],
        )
        return allocation_pb2.CreateAllocationResponse(allocation=allocation).SerializeToString()

    async with AsyncClient(await scripted({CREATE: behaviour}), "token", retry=FAST) as client:
        created = await client.create_allocation(gpu_model="H100", node_count=1)
    assert created.allocation_id == "alloc-1"
    assert len(seen) == 2
    assert seen[0].request_id
    assert seen[1].request_id == seen[0].request_id


async def test_a_call_not_safe_to_repeat_is_not_retried_on_cancelled(scripted: Start) -> None:
    """Creating a tenant acts once: after CANCELLED the caller reads the tenant instead."""
    behaviour, seen = _answers(grpc.StatusCode.CANCELLED, None)
    async with AsyncClient(await scripted({CREATE_TENANT: behaviour}), "token", retry=FAST) as client:
        with pytest.raises(GpucloudError) as caught:
            await client.create_tenant("acme")
    assert caught.value.code is grpc.StatusCode.CANCELLED
    assert len(seen) == 1


async def test_a_first_try_that_finds_no_operation_is_not_found(scripted: Start) -> None:
    behaviour, seen = _answers(grpc.StatusCode.NOT_FOUND)
    async with AsyncClient(await scripted({DELETE: behaviour}), "token", retry=FAST) as client:
        with pytest.raises(NotFoundError):
            await client.delete_operation("operations/op-1")
    assert len(seen) == 1


async def test_a_zero_timeout_is_a_deadline_now_not_the_default(scripted: Start) -> None:
    """``timeout=0`` used to mean the client's default (30 s): against a server that never
    answers, the call hung instead of failing at once."""
    never = asyncio.Event()

    async def hang(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        await never.wait()
        return b""

    async with AsyncClient(await scripted({CREATE: hang}), "token") as client:
        with pytest.raises(DeadlineExceededError):
            await asyncio.wait_for(client.create_allocation(gpu_model="H100", node_count=1, timeout=0), 10)


def test_the_first_retry_waits_at_most_the_initial_back_off() -> None:
    policy = RetryPolicy(initial_backoff=0.05, max_backoff=0.3)
    assert max(policy.delay(1) for _ in range(2_000)) <= 0.05
    assert 0.1 < max(policy.delay(3) for _ in range(2_000)) <= 0.2
    assert max(policy.delay(10) for _ in range(2_000)) <= 0.3


async def test_a_closed_blocking_client_says_so(scripted: Start) -> None:
    behaviour, _ = _answers(None)
    address = await scripted({CREATE: behaviour})
    client = Client(address, "token")
    await asyncio.to_thread(client.close)
    with pytest.raises(RuntimeError, match="this Client is closed; make a new one"):
        await asyncio.to_thread(client.get_allocation, "alloc-1")


def test_a_zero_back_off_is_refused_when_retrying_until_the_deadline() -> None:
    """``max_backoff=0`` (or ``initial_backoff=0``) with no ``attempts`` made thousands of tries a
    second until the deadline; with a bound on the tries it stays allowed."""
    with pytest.raises(InvalidValueError, match="initial_backoff") as caught:
        RetryPolicy(initial_backoff=0)
    assert caught.value.field == "initial_backoff"
    with pytest.raises(InvalidValueError, match="max_backoff") as caught:
        RetryPolicy(max_backoff=0)
    assert caught.value.field == "max_backoff"
    assert RetryPolicy(attempts=3, initial_backoff=0, max_backoff=0).delay(1) == 0

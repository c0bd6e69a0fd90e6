"""The access log: one ``rpc`` line per call, with what an operator needs to trace it and never a secret."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, MutableMapping
from typing import Any

import grpc
import pytest
import structlog
from structlog.typing import EventDict

from clients import AsyncClient, NotFoundError
from gpucloud.v1 import allocation_pb2, allocation_pb2_grpc, node_pb2
from services.auth import tokens
from tests.conftest import RunningControlPlane, register_ready_nodes


async def test_each_call_logs_one_line_with_method_code_duration_key_and_caller(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 1)
    created = await operator.create_tenant("acme")
    refused_logged = asyncio.Event()

    def note_refusal(logger: object, method: str, entry: EventDict) -> EventDict:
        if entry.get("event") == "rpc" and entry.get("code") == "NOT_FOUND":
            refused_logged.set()
        return entry

    async with control_plane.client(created.token) as tenant:
        with structlog.testing.capture_logs(processors=[note_refusal]) as logs:
            await tenant.create_allocation(gpu_model="H100", node_count=1, request_id="req-logged")
            with pytest.raises(NotFoundError):
                await tenant.get_allocation("alloc-00000000000000000000000000ff")
            # The server writes a refused call's line after the status went out: the client
            # can hear the answer first.
            await asyncio.wait_for(refused_logged.wait(), timeout=10)
    lines = [entry for entry in logs if entry["event"] == "rpc"]
    assert [(line["method"], line["code"]) for line in lines] == [
        ("/gpucloud.v1.AllocationService/CreateAllocation", "OK"),
        ("/gpucloud.v1.AllocationService/GetAllocation", "NOT_FOUND"),
    ]
    token_id, secret = tokens.split(created.token) or ("", "")
    for line in lines:
        assert line["tenant"] == "acme"
        assert line["role"] == "tenant"
        assert line["token_id"] == token_id == created.token_id
        assert isinstance(line["duration_ms"], float)
        assert line["duration_ms"] >= 0
    assert lines[0]["request_id"] == "req-logged"
    assert lines[1]["request_id"] is None  # a read sends no key
    assert secret not in str(logs)


async def _logged_line(call: Awaitable[object], *, code: grpc.StatusCode) -> tuple[MutableMapping[str, Any], str]:
    """Run ``call`` (which must fail with ``code``) under captured logs; its ``rpc`` line and
    everything logged meanwhile, rendered."""
    logged = asyncio.Event()

    def note_line(logger: object, method: str, entry: EventDict) -> EventDict:
        if entry.get("event") == "rpc":
            logged.set()
        return entry

    with structlog.testing.capture_logs(processors=[note_line]) as logs:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
        assert refused.value.code() == code
        # The line is written after the status went out (see the test above).
        await asyncio.wait_for(logged.wait(), timeout=10)
    (line,) = [entry for entry in logs if entry["event"] == "rpc"]
    return line, repr(logs)


async def test_an_unauthenticated_call_logs_nothing_of_its_body(control_plane: RunningControlPlane) -> None:
    """Nothing of a call's body is read, let alone logged, before the caller is known: a call
    with no token and a 4 MB request_id leaves a log line of the usual size."""
    huge = allocation_pb2.CreateAllocationRequest(
        tenant_id="acme", gpu_model=node_pb2.GPU_MODEL_H100, node_count=1, request_id="r" * 4_000_000
    )
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        stub = allocation_pb2_grpc.AllocationServiceStub(channel)
        line, logged = await _logged_line(stub.CreateAllocation(huge, timeout=30), code=grpc.StatusCode.UNAUTHENTICATED)
    assert line["code"] == "UNAUTHENTICATED"
    assert line["request_id"] is None
    assert len(logged) < 4096


async def test_only_a_well_formed_request_id_is_logged(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """An authenticated caller's request_id is logged only once it passes the request_id rules: one
    too long, or an API token pasted into it, is refused and not written to the log."""
    created = await operator.create_tenant("acme")
    token_id, secret = tokens.split(created.token) or ("", "")
    metadata = (("authorization", f"Bearer {created.token}"),)
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        stub = allocation_pb2_grpc.AllocationServiceStub(channel)
        for request_id in ("k" * 1_000_000, created.token, f"key-{created.token}"):
            request = allocation_pb2.CreateAllocationRequest(
                gpu_model=node_pb2.GPU_MODEL_H100, node_count=1, request_id=request_id
            )
            call = stub.CreateAllocation(request, metadata=metadata, timeout=30)
            line, logged = await _logged_line(call, code=grpc.StatusCode.INVALID_ARGUMENT)
            assert line["request_id"] is None
            assert line["tenant"] == "acme"
            assert line["token_id"] == token_id
            assert secret not in logged
            assert len(logged) < 4096

"""request_id idempotency of CreateAllocation, end to end through the real client and server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from clients import AsyncClient, InvalidArgumentError, ResourceExhaustedError
from gpucloud.v1 import allocation_pb2, allocation_pb2_grpc, node_pb2
from tests.conftest import RunningControlPlane, register_ready_nodes, start_control_plane
from tests.e2e.helpers import list_all, new_tenant


async def count_allocations(operator: AsyncClient) -> int:
    return len(await list_all(operator, page_size=100))


async def ready_node_ids(operator: AsyncClient) -> set[str]:
    page = await operator.list_nodes(state="READY", page_size=1000)
    assert not page.next_page_token
    return {n.node_id for n in page}


async def test_retry_with_same_request_id_returns_first_result(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """A retry with the same request_id returns the same allocation and creates nothing new."""
    await register_ready_nodes(operator, 4)
    async with await new_tenant(operator, control_plane, "acme") as tenant:
        first = await tenant.create_allocation(gpu_model="H100", node_count=2, request_id="req-retry-1")
        ready_after_first = await ready_node_ids(operator)
        again = await tenant.create_allocation(gpu_model="H100", node_count=2, request_id="req-retry-1")

    assert again.allocation_id == first.allocation_id
    assert again.node_ids == first.node_ids
    assert (first.replayed, again.replayed) == (False, True)
    assert len(first.node_ids) == 2
    assert await count_allocations(operator) == 1
    assert await ready_node_ids(operator) == ready_after_first
    assert len(ready_after_first) == 2


async def test_a_replay_is_marked_in_trailing_metadata(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """The call that placed the nodes carries no mark; every call answered from its record
    says so (``idempotent-replayed: true``), so a caller can tell it allocated nothing."""
    await register_ready_nodes(operator, 2)
    await operator.create_tenant("acme")
    request = allocation_pb2.CreateAllocationRequest(
        tenant_id="acme", gpu_model=node_pb2.GPU_MODEL_H100, node_count=1, request_id="req-marked"
    )
    metadata = (("authorization", f"Bearer {control_plane.operator_token}"),)
    marks: list[tuple[str, str | bytes | None]] = []
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        stub = allocation_pb2_grpc.AllocationServiceStub(channel)
        for _ in range(3):
            call = stub.CreateAllocation(request, metadata=metadata, timeout=15)
            response = await call
            trailing = dict(await call.trailing_metadata() or ())
            marks.append((response.allocation.allocation_id, trailing.get("idempotent-replayed")))
        other = allocation_pb2.CreateAllocationRequest()
        other.CopyFrom(request)
        other.request_id = "req-other"
        fresh = stub.CreateAllocation(other, metadata=metadata, timeout=15)
        await fresh
        fresh_mark = dict(await fresh.trailing_metadata() or ()).get("idempotent-replayed")

    first_id = marks[0][0]
    assert marks == [(first_id, None), (first_id, "true"), (first_id, "true")]
    assert fresh_mark is None


@pytest.mark.parametrize(
    ("gpu_model", "node_count"),
    [("H100", 3), ("A100", 2)],
    ids=["other-node-count", "other-gpu-model"],
)
async def test_same_request_id_with_different_request_is_rejected(
    control_plane: RunningControlPlane, operator: AsyncClient, gpu_model: str, node_count: int
) -> None:
    """The same request_id with a different request is INVALID_ARGUMENT IDEMPOTENCY_KEY_REUSED and executes nothing."""
    await register_ready_nodes(operator, 4, prefix="h100")
    await register_ready_nodes(operator, 3, gpu_model="A100", prefix="a100")
    async with await new_tenant(operator, control_plane, "acme") as tenant:
        first = await tenant.create_allocation(gpu_model="H100", node_count=2, request_id="req-reused")
        ready_before = await ready_node_ids(operator)
        with pytest.raises(InvalidArgumentError) as caught:
            await tenant.create_allocation(gpu_model=gpu_model, node_count=node_count, request_id="req-reused")
        # The key still answers with the original allocation.
        replay = await tenant.create_allocation(gpu_model="H100", node_count=2, request_id="req-reused")

    assert caught.value.reason == "IDEMPOTENCY_KEY_REUSED"
    assert "request_id" in caught.value.field_violations
    assert await count_allocations(operator) == 1
    assert await ready_node_ids(operator) == ready_before
    assert len(ready_before) == 5
    assert replay.allocation_id == first.allocation_id


async def test_request_id_is_scoped_per_tenant(control_plane: RunningControlPlane, operator: AsyncClient) -> None:
    """Two tenants using the same request_id each get their own allocation."""
    await register_ready_nodes(operator, 4)
    async with (
        await new_tenant(operator, control_plane, "tenant-a") as a,
        await new_tenant(operator, control_plane, "tenant-b") as b,
    ):
        from_a = await a.create_allocation(gpu_model="H100", node_count=2, request_id="shared-key")
        from_b = await b.create_allocation(gpu_model="H100", node_count=2, request_id="shared-key")
        a_again = await a.create_allocation(gpu_model="H100", node_count=2, request_id="shared-key")

    assert from_a.allocation_id != from_b.allocation_id
    assert (from_a.tenant_id, from_b.tenant_id) == ("tenant-a", "tenant-b")
    assert not set(from_a.node_ids) & set(from_b.node_ids)
    assert a_again.allocation_id == from_a.allocation_id
    assert await count_allocations(operator) == 2
    assert await ready_node_ids(operator) == set()


async def test_concurrent_duplicates_create_one_allocation(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """50 concurrent creates with one request_id make exactly one allocation and all get its id."""
    await register_ready_nodes(operator, 4)
    token = (await operator.create_tenant("acme")).token
    clients = [control_plane.client(token) for _ in range(5)]
    try:
        results = await asyncio.gather(
            *(
                clients[i % len(clients)].create_allocation(gpu_model="H100", node_count=2, request_id="burst-key")
                for i in range(50)
            )
        )
    finally:
        for client in clients:
            await client.close()

    ids = {r.allocation_id for r in results}
    assert len(results) == 50
    assert len(ids) == 1
    # One call placed the nodes; the client says of every other that it was answered from the key.
    assert sorted(r.replayed for r in results) == [False] + [True] * 49
    assert {r.node_ids for r in results} == {results[0].node_ids}
    listed = await list_all(operator)
    assert [a.allocation_id for a in listed] == [results[0].allocation_id]
    assert len(await ready_node_ids(operator)) == 2


async def test_idempotency_survives_restart(tmp_path: Path, database_url: str) -> None:
    """After a control-plane restart a retry with the same request_id returns the first allocation."""
    data_dir = tmp_path / "restart"
    running = await start_control_plane(data_dir, database_url)
    try:
        async with running.client() as operator:
            await register_ready_nodes(operator, 4)
            token = (await operator.create_tenant("acme")).token
            async with running.client(token) as tenant:
                first = await tenant.create_allocation(gpu_model="H100", node_count=2, request_id="req-durable")
    finally:
        await running.plane.stop()

    restarted = await start_control_plane(data_dir, database_url)
    try:
        async with restarted.client() as operator, restarted.client(token) as tenant:
            again = await tenant.create_allocation(gpu_model="H100", node_count=2, request_id="req-durable")
            allocations = await list_all(operator)
            ready = await ready_node_ids(operator)
    finally:
        await restarted.plane.stop()

    assert again.allocation_id == first.allocation_id
    assert again.node_ids == first.node_ids
    assert again.replayed
    assert [a.allocation_id for a in allocations] == [first.allocation_id]
    assert len(ready) == 2


async def test_insufficient_capacity_changes_nothing(control_plane: RunningControlPlane, operator: AsyncClient) -> None:
    """Asking for more nodes than are READY is RESOURCE_EXHAUSTED and leaves every node READY and unassigned."""
    node_ids = await register_ready_nodes(operator, 3)
    async with await new_tenant(operator, control_plane, "acme") as tenant:
        with pytest.raises(ResourceExhaustedError) as caught:
            await tenant.create_allocation(
                gpu_model="H100", node_count=4, request_id="req-too-big", fail_if_unavailable=True
            )
        assert caught.value.reason == "INSUFFICIENT_CAPACITY"
        for node_id in node_ids:
            node = await operator.get_node(node_id)
            assert (node.state, node.allocation_id) == ("READY", None)
        assert await count_allocations(operator) == 0

        # A capacity error is not recorded against the key: once capacity exists the retry succeeds.
        await register_ready_nodes(operator, 1, prefix="extra")
        placed = await tenant.create_allocation(gpu_model="H100", node_count=4, request_id="req-too-big")

    assert len(placed.node_ids) == 4
    assert placed.state == "ACTIVE"
    assert await ready_node_ids(operator) == set()

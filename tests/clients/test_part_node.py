"""What the client says of part-node allocations: whole GPUs, a MIG slice or a soft share of one
node's GPU, admitted by the scheduling pass the create waits for, with the GPUs each holds; a
bad combination is refused naming its field."""

from __future__ import annotations

import asyncio

import pytest

from clients import Allocation, AsyncClient, Client, GpuHold, InvalidArgumentError
from tests.conftest import RunningControlPlane, register_ready_nodes


async def _one_free_node(operator: AsyncClient) -> str:
    """One READY H100 node and the tenant acme: the node's id."""
    [node] = await register_ready_nodes(operator, 1)
    await operator.create_tenant("acme")
    return node


async def test_two_gpus_are_admitted_at_once_on_one_node_whole(operator: AsyncClient) -> None:
    node = await _one_free_node(operator)
    admitted = await operator.create_allocation(gpu_model="H100", gpus=2, tenant_id="acme")
    assert (admitted.state, admitted.node_count, admitted.gpus) == ("ACTIVE", 0, 2)
    assert admitted.part_node
    assert admitted.node_ids == (node,)
    assert len(admitted.gpu_holds) == 2
    assert {(h.node_id, h.milli, h.mig_start) for h in admitted.gpu_holds} == {(node, 1000, -1)}
    assert len({h.gpu_index for h in admitted.gpu_holds}) == 2
    assert all(h.gpu_uuid == f"GPU-{node}-{h.gpu_index:02d}" for h in admitted.gpu_holds)


async def test_a_mig_slice_holds_its_memory_slices_eighths_of_one_gpu(operator: AsyncClient) -> None:
    node = await _one_free_node(operator)
    created = await operator.create_allocation(
        gpu_model="H100", mig_profile="3g.40gb", cpu_milli=4000, memory_mib=16384, tenant_id="acme"
    )
    assert (created.state, created.mig_profile, created.cpu_milli, created.memory_mib) == (
        "ACTIVE",
        "3g.40gb",
        4000,
        16384,
    )
    [hold] = created.gpu_holds
    assert isinstance(hold, GpuHold)
    assert (hold.node_id, hold.milli) == (node, 500)
    assert hold.gpu_index >= 0
    assert hold.mig_start >= 0


async def test_gpus_and_a_share_together_are_refused_naming_the_field(operator: AsyncClient) -> None:
    await _one_free_node(operator)
    with pytest.raises(InvalidArgumentError) as caught:
        await operator.create_allocation(gpu_model="H100", gpus=2, share_milli=100, tenant_id="acme")
    assert "share_milli" in caught.value.field_violations
    assert len(await operator.list_allocations(tenant_id="acme")) == 0


async def test_the_blocking_client_creates_part_of_a_node_too(control_plane: RunningControlPlane) -> None:
    async with control_plane.client() as operator:
        node = await _one_free_node(operator)

    def blocking() -> tuple[Allocation, Allocation]:
        with Client(control_plane.address, control_plane.operator_token, timeout=15) as client:
            created = client.create_allocation(gpu_model="H100", share_milli=250, tenant_id="acme")
            return created, client.wait_admitted(created.allocation_id, timeout=30, poll_s=0.05)

    # On a thread of its own: the server runs on this test's event loop.
    created, admitted = await asyncio.to_thread(blocking)
    assert (created.state, created.share_milli) == ("ACTIVE", 250)
    assert admitted.gpu_holds == created.gpu_holds
    assert [(h.node_id, h.milli) for h in admitted.gpu_holds] == [(node, 250)]

"""The allocation queue through the real server: gangs admitted whole or waiting with nothing
held, in priority and age order, a waiting gang not overtaken by smaller work, and a reason
with the fleet's figures for every allocation that waits."""

from __future__ import annotations

import asyncio

import pytest

from clients import AsyncClient, NotFoundError, ResourceExhaustedError
from clients.models import Allocation
from tests.conftest import RunningControlPlane, register_ready_nodes, until
from tests.e2e.helpers import new_tenant


async def _state(client: AsyncClient, allocation_id: str) -> str:
    return (await client.get_allocation(allocation_id)).state


async def _cancel_and_release(client: AsyncClient, allocation_id: str) -> None:
    operation = await client.cancel_allocation(allocation_id)
    assert (await client.wait_operation(operation.name, timeout=30)).done


async def _free(operator: AsyncClient) -> int:
    return sum(node.state == "READY" for node in (await operator.list_nodes(gpu_model="H100", page_size=1000)).items)


async def test_two_gangs_of_64_on_100_nodes_one_runs_the_other_waits_holding_nothing(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 100)
    await operator.create_tenant("acme")
    await operator.create_tenant("bolt")
    first, second = await asyncio.gather(
        operator.create_allocation(gpu_model="H100", node_count=64, tenant_id="acme"),
        operator.create_allocation(gpu_model="H100", node_count=64, tenant_id="bolt"),
    )
    running, waiting = (first, second) if first.state == "ACTIVE" else (second, first)
    assert (running.state, len(running.node_ids)) == ("ACTIVE", 64)
    assert (waiting.state, waiting.node_ids, waiting.queue_position) == ("PENDING", (), 1)
    assert waiting.admit_time is None
    assert await _free(operator) == 36

    explained = await operator.explain_allocation(waiting.allocation_id)
    [reason] = explained.reasons
    assert reason.kind == "WAITING_FOR_CAPACITY"
    assert reason.figures == {"free": 36, "spares": 0, "needed": 64}

    await _cancel_and_release(operator, running.allocation_id)
    await until(lambda: _admitted(operator, waiting.allocation_id), timeout=15)
    admitted = await operator.get_allocation(waiting.allocation_id)
    assert (len(admitted.node_ids), admitted.queue_position) == (64, 0)
    assert admitted.admit_time is not None
    assert admitted.create_time is not None
    assert admitted.admit_time > admitted.create_time
    assert (await operator.explain_allocation(waiting.allocation_id)).reasons == ()


async def _admitted(client: AsyncClient, allocation_id: str) -> bool:
    return await _state(client, allocation_id) == "ACTIVE"


async def test_a_large_gang_is_not_starved_by_a_stream_of_small_ones(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Six one-node allocations run; a gang of eight waits; a stream of one-node requests keeps
    arriving while the six end. Two nodes are free from the start and more free one by one,
    yet no small request overtakes the gang: it is admitted first, the stream behind it."""
    await register_ready_nodes(operator, 10)
    await operator.create_tenant("acme")
    running = [await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme") for _ in range(6)]
    gang = await operator.create_allocation(gpu_model="H100", node_count=8, tenant_id="acme")
    assert gang.state == "PENDING"
    stream: list[Allocation] = []
    for small in running:
        arrived = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
        assert arrived.state == "PENDING", "a small request overtook the waiting gang"
        reasons = (await operator.explain_allocation(arrived.allocation_id)).reasons
        if await _state(operator, gang.allocation_id) == "PENDING":
            assert [r.kind for r in reasons] == ["BEHIND_GANGS"]
            assert reasons[0].figures["head_needs"] == 8
            assert gang.allocation_id not in reasons[0].message, "another allocation's id in a reason"
        stream.append(arrived)
        await _cancel_and_release(operator, small.allocation_id)
    await until(lambda: _admitted(operator, gang.allocation_id), timeout=15)
    # Ten nodes: the gang's eight, then the first two of the stream, in arrival order.
    await until(lambda: _admitted(operator, stream[1].allocation_id), timeout=15)
    admitted_gang = await operator.get_allocation(gang.allocation_id)
    states = [await operator.get_allocation(a.allocation_id) for a in stream]
    assert [a.state for a in states] == ["ACTIVE", "ACTIVE", "PENDING", "PENDING", "PENDING", "PENDING"]
    gang_admitted = admitted_gang.admit_time
    assert gang_admitted is not None
    assert all(a.admit_time is not None and gang_admitted <= a.admit_time for a in states[:2])
    assert [a.queue_position for a in states[2:]] == [1, 2, 3, 4]


async def test_higher_priority_is_admitted_first_and_positions_follow(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 2)
    await operator.create_tenant("acme")
    holder = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    low = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    high = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme", priority=10)
    assert (low.state, high.state) == ("PENDING", "PENDING")
    assert (high.priority, high.queue_position) == (10, 1)
    assert (await operator.get_allocation(low.allocation_id)).queue_position == 2
    await _cancel_and_release(operator, holder.allocation_id)
    await until(lambda: _admitted(operator, high.allocation_id), timeout=15)
    assert await _state(operator, low.allocation_id) == "PENDING"
    assert (await operator.get_allocation(low.allocation_id)).queue_position == 1


async def test_fail_if_unavailable_refuses_and_records_nothing(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 3)
    await operator.create_tenant("acme")
    with pytest.raises(ResourceExhaustedError) as refused:
        await operator.create_allocation(gpu_model="H100", node_count=4, tenant_id="acme", fail_if_unavailable=True)
    assert (refused.value.reason, refused.value.metadata["reason"]) == ("INSUFFICIENT_CAPACITY", "NO_ACCEPTABLE_MODEL")
    assert "the fleet has 3 H100 node(s)" in str(refused.value)
    assert (await operator.list_allocations(tenant_id="acme")).items == []
    # Behind a waiting allocation, a request that asks not to wait is refused even if it would fit.
    await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    waiting = await operator.create_allocation(gpu_model="H100", node_count=3, tenant_id="acme", priority=5)
    assert waiting.state == "PENDING"
    with pytest.raises(ResourceExhaustedError, match=r"behind 1 waiting allocation\(s\) in the H100 queue") as behind:
        await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme", fail_if_unavailable=True)
    assert (behind.value.metadata["reason"], behind.value.metadata["position"]) == ("BEHIND_GANGS", "2")
    # Above the queue's priority it is placed at once.
    urgent = await operator.create_allocation(
        gpu_model="H100", node_count=1, tenant_id="acme", priority=6, fail_if_unavailable=True
    )
    assert urgent.state == "ACTIVE"


async def test_cancelling_a_pending_allocation_is_done_at_once_and_unblocks_the_queue(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 4)
    tenant = await new_tenant(operator, control_plane, "acme")
    try:
        await tenant.create_allocation(gpu_model="H100", node_count=1)
        head = await tenant.create_allocation(gpu_model="H100", node_count=4)
        behind = await tenant.create_allocation(gpu_model="H100", node_count=2)
        assert (head.state, behind.state) == ("PENDING", "PENDING")
        operation = await tenant.cancel_allocation(head.allocation_id)
        assert (operation.done, operation.state) == (True, "CANCELLED")
        cancelled = await tenant.get_allocation(head.allocation_id)
        assert cancelled.state == "CANCELLED"
        assert cancelled.cancel_time == cancelled.release_time
        await until(lambda: _admitted(tenant, behind.allocation_id), timeout=15)
        # Again: the same finished operation.
        assert (await tenant.cancel_allocation(head.allocation_id)).name == operation.name
    finally:
        await tenant.close()


async def test_a_gang_larger_than_the_fleet_waits_without_holding_up_the_rest(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 3)
    await operator.create_tenant("acme")
    huge = await operator.create_allocation(gpu_model="H100", node_count=5, tenant_id="acme", priority=1000)
    # Placed at once, even asking not to wait: the huge one is not counted as queued ahead.
    small = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme", fail_if_unavailable=True)
    assert small.state == "ACTIVE"
    [reason] = (await operator.explain_allocation(huge.allocation_id)).reasons
    assert reason.kind == "NO_ACCEPTABLE_MODEL"
    assert reason.figures == {"fleet": 3, "spares": 0, "needed": 5}


async def test_every_pending_allocation_has_reasons_matching_the_fleet(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 12)
    await operator.create_tenant("acme")
    await operator.set_spare_pool("H100", 1)
    sizes = [4, 5, 3, 2, 1, 13, 1]
    made = [await operator.create_allocation(gpu_model="H100", node_count=n, tenant_id="acme") for n in sizes]
    # 4 + 5 fit (11 free over the one spare); 3 does not, and everything after it waits.
    assert [a.state for a in made] == ["ACTIVE", "ACTIVE", *["PENDING"] * 5]
    free = await _free(operator)
    assert free == 3
    positions = []
    for allocation in made[2:]:
        explained = await operator.explain_allocation(allocation.allocation_id)
        assert explained.reasons, allocation
        positions.append(explained.allocation.queue_position)
        for reason in explained.reasons:
            if reason.kind == "WAITING_FOR_CAPACITY":
                assert reason.figures == {"free": free, "spares": 1, "needed": allocation.node_count}
            elif reason.kind == "BEHIND_GANGS":
                assert reason.figures["head_needs"] == 3
                assert reason.figures["free"] == free
            else:
                assert reason.kind == "NO_ACCEPTABLE_MODEL"
                assert allocation.node_count == 13
    assert positions == [1, 2, 3, 4, 5]


async def test_a_tenant_cannot_explain_another_tenants_allocation(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 1)
    acme = await new_tenant(operator, control_plane, "acme")
    bolt = await new_tenant(operator, control_plane, "bolt")
    try:
        waiting = await acme.create_allocation(gpu_model="H100", node_count=2)
        with pytest.raises(NotFoundError):
            await bolt.explain_allocation(waiting.allocation_id)
        assert (await acme.explain_allocation(waiting.allocation_id)).reasons
    finally:
        await acme.close()
        await bolt.close()


async def test_a_same_block_gang_is_not_admitted_on_fragments_though_enough_are_free(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Sixteen nodes under two leaf switches of eight; one taken from each leaves 7 + 7 free.
    A gang of eight that asks for one block waits (TOPOLOGY, with the largest free block), is
    refused outright with fail_if_unavailable, and is admitted under one leaf switch once
    that switch has eight free; a gang that does not ask is placed across the two at once."""
    await register_ready_nodes(operator, 16)
    await operator.create_tenant("acme")
    taken = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    assert taken.node_ids == ("node-000",)
    await operator.cordon_node("node-008", "held for the test")
    gang = await operator.create_allocation(gpu_model="H100", node_count=8, tenant_id="acme", same_block=True)
    assert (gang.state, gang.same_block) == ("PENDING", True)
    [reason] = (await operator.explain_allocation(gang.allocation_id)).reasons
    assert reason.kind == "TOPOLOGY"
    assert reason.figures == {"largest_block": 7, "needed": 8, "free": 14}
    with pytest.raises(ResourceExhaustedError, match="under one leaf switch"):
        await operator.create_allocation(
            gpu_model="H100", node_count=8, tenant_id="acme", same_block=True, priority=1, fail_if_unavailable=True
        )
    # Freed by the periodic cycle: an uncordon wakes no one.
    await operator.uncordon_node("node-008")
    await until(lambda: _admitted(operator, gang.allocation_id), timeout=15)
    placed = await operator.get_allocation(gang.allocation_id)
    assert placed.node_ids == tuple(f"node-{i:03d}" for i in range(8, 16))
    await _cancel_and_release(operator, gang.allocation_id)
    await operator.cordon_node("node-008", "held for the test")
    spread = await operator.create_allocation(gpu_model="H100", node_count=8, tenant_id="acme")
    assert spread.state == "ACTIVE"
    assert {node < "node-008" for node in spread.node_ids} == {True, False}

"""GetFragmentation, PlanDefragmentation and ApplyDefragmentation through the real server, on
either database: the pool's free capacity as it lies across leaf switches, a plan that frees one
switch whole while nothing moves, and the plan's moves made on an operator's go."""

from __future__ import annotations

import pytest

from clients import AsyncClient, FailedPreconditionError
from tests.conftest import RunningControlPlane, register_ready_nodes, until


async def test_fragmentation_and_a_defrag_plan_that_moves_nothing(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Sixteen nodes under two leaf switches of eight. Six one-node allocations fill leaf-0's
    first six nodes; a seventh, forced onto leaf-1, leaves 2 + 7 free; one free node of leaf-1
    is cordoned (stranded), which keeps leaf-1 from being freed: the plan frees leaf-0 with six
    moves. Uncordoned, leaf-1 is the cheaper switch: one move. Nothing moves either time."""
    await register_ready_nodes(operator, 16)
    await operator.create_tenant("acme")
    small = [await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme") for _ in range(6)]
    assert [a.node_ids[0] for a in small] == [f"node-{i:03d}" for i in range(6)]
    for node in ("node-006", "node-007"):
        await operator.cordon_node(node, "keeping leaf-0 for the test")
    lone = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    assert lone.node_ids == ("node-008",)
    await operator.uncordon_node("node-006")
    await operator.uncordon_node("node-007")
    await operator.cordon_node("node-015", "a bad cable")

    [pool] = await operator.get_fragmentation()
    assert (pool.gpu_model, pool.nodes, pool.free_nodes, pool.free_gpus) == ("H100", 16, 8, 64)
    assert (pool.largest_free_block, pool.stranded_gpus) == (6, 8)
    by_node = {n.node_id: n for n in pool.node_capacity}
    assert by_node["node-008"].allocation_id == lone.allocation_id
    assert (by_node["node-015"].stranded, by_node["node-015"].free_gpus) == (True, 0)

    before_nodes = {n.node_id: n.state for n in (await operator.list_nodes(page_size=100)).items}
    made = await operator.plan_defragmentation("H100", blocks=1)
    # The stranded node-015 cannot move, so leaf-1 cannot be freed whole: leaf-0 it is, its six
    # allocations into leaf-1's six free nodes.
    assert made.freed_leaf_switches == ("leaf-0",)
    assert [m.from_node_id for m in made.moves] == [f"node-{i:03d}" for i in range(6)]
    assert sorted(m.to_node_id for m in made.moves) == [f"node-{i:03d}" for i in range(9, 15)]
    await operator.uncordon_node("node-015")
    made = await operator.plan_defragmentation("H100", blocks=1)
    assert made.freed_leaf_switches == ("leaf-1",)
    assert [(m.allocation_id, m.from_node_id) for m in made.moves] == [(lone.allocation_id, "node-008")]
    assert made.moves[0].to_node_id in ("node-006", "node-007")
    assert [(c.allocation_id, c.nodes_moved, c.node_count) for c in made.costs] == [(lone.allocation_id, 1, 1)]
    # A plan only: nothing moved.
    after_nodes = {n.node_id: n.state for n in (await operator.list_nodes(page_size=100)).items}
    assert after_nodes == before_nodes
    assert (await operator.get_allocation(lone.allocation_id)).node_ids == ("node-008",)


async def test_the_plans_moves_made_on_an_operators_go_free_the_switch_once_scrubbed(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Sixteen nodes under two leaf switches: one-node allocations on node-000..005 and one on
    node-008. The plan moves node-008's to leaf-0; once made, the allocation runs there, billed
    without a gap, node-008 is scrubbed back to READY and leaf-1 is wholly free. The same go
    sent again changes nothing; a go the fleet no longer allows moves nothing."""
    await register_ready_nodes(operator, 16)
    await operator.create_tenant("acme")
    small = [await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme") for _ in range(6)]
    for node in ("node-006", "node-007"):
        await operator.cordon_node(node, "keeping leaf-0 for the test")
    lone = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    assert lone.node_ids == ("node-008",)
    for node in ("node-006", "node-007"):
        await operator.uncordon_node(node)
    [pool] = await operator.get_fragmentation()
    assert pool.largest_free_block == 7

    plan = await operator.plan_defragmentation("H100")
    [move] = plan.moves
    assert (move.allocation_id, move.from_node_id) == (lone.allocation_id, "node-008")
    done = await operator.apply_defragmentation(plan.moves)
    assert (done.moves, done.made) == (plan.moves, 1)

    moved = await operator.get_allocation(lone.allocation_id)
    assert (moved.state, moved.node_ids) == ("ACTIVE", (move.to_node_id,))
    [made] = moved.replacements
    assert (made.removed_node_id, made.spare_node_id) == ("node-008", move.to_node_id)
    assert made.reason.startswith(f"defragmentation: moved to {move.to_node_id} to free leaf switch leaf-1")
    assert made.time == made.spare_time
    assert moved.degraded_reason == ""
    # Billing passes from one node to the other at one instant: no gap, no overlap.
    usage = (await operator.list_usage_events(tenant_id="acme", page_size=1000)).items
    mine = sorted((e.node_id, e.kind, e.event_time) for e in usage if e.allocation_id == lone.allocation_id)
    assert mine == sorted(
        [("node-008", "START", lone.admit_time)] * 8
        + [("node-008", "STOP", made.time)] * 8
        + [(move.to_node_id, "START", made.time)] * 8
    )

    # No agent runs node-008: the control plane counts its scrub done, and it is READY again.
    async def scrubbed() -> bool:
        return (await operator.get_node("node-008")).state == "READY"

    await until(scrubbed, timeout=20)
    events = [(e.event, e.from_state, e.to_state) for e in (await operator.list_node_events("node-008")).items]
    assert events[-2:] == [("RELEASE", "ALLOCATED", "SCRUBBING"), ("FINISH_SCRUB", "SCRUBBING", "READY")]
    [pool] = await operator.get_fragmentation()
    assert (pool.free_nodes, pool.largest_free_block) == (9, 8)

    # Sent again (a lost reply, say): answered as made, nothing more moves or is billed.
    again = await operator.apply_defragmentation(plan.moves)
    assert (again.moves, again.made) == (plan.moves, 0)
    assert len((await operator.list_usage_events(tenant_id="acme", page_size=1000)).items) == len(usage)

    # Plan leaf-0 free; one of its allocations is cancelled before the go: nothing moves.
    await operator.cordon_node("node-015", "keeping leaf-1 for the test")
    plan = await operator.plan_defragmentation("H100")
    assert plan.freed_leaf_switches == ("leaf-0",)
    assert len(plan.moves) == 7
    # Never back to a node it held: its usage events there are written once.
    [back] = [m for m in plan.moves if m.allocation_id == lone.allocation_id]
    assert back.to_node_id not in ("node-008", "node-015")
    gone = plan.moves[3]
    await operator.wait_operation((await operator.cancel_allocation(gone.allocation_id)).name, timeout=20)
    with pytest.raises(FailedPreconditionError) as stale:
        await operator.apply_defragmentation(plan.moves)
    assert stale.value.reason == "MOVE_NO_LONGER_POSSIBLE"
    assert stale.value.metadata["field"] == "moves[3].allocation_id"
    assert "is CANCELLED" in stale.value.message
    assert [
        (await operator.get_allocation(a.allocation_id)).node_ids
        for a in small
        if a.allocation_id != gone.allocation_id
    ] == [a.node_ids for a in small if a.allocation_id != gone.allocation_id]

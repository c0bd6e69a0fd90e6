"""GetFragmentation and PlanDefragmentation through the real server, on either database: the
pool's free capacity as it lies across leaf switches, and a plan that frees one switch whole
while nothing moves."""

from __future__ import annotations

from clients import AsyncClient
from tests.conftest import RunningControlPlane, register_ready_nodes


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

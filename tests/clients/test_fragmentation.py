"""Fragmentation through the client: each pool's free capacity and how it lies across leaf
switches, and a defragmentation plan that frees a whole switch while nothing moves. Shared with
the CLI's tests: ``partly_held_fleet`` builds the fleet both read."""

from __future__ import annotations

import asyncio

import pytest

from clients import (
    AsyncClient,
    Client,
    DefragmentationCost,
    DefragmentationMove,
    DefragmentationPlan,
    FailedPreconditionError,
    InvalidArgumentError,
    InvalidValueError,
    NodeCapacity,
    PermissionDeniedError,
    PoolFragmentation,
    convert,
)
from gpucloud.v1 import node_pb2
from tests.conftest import RunningControlPlane, register_ready_nodes, until

# Where partly_held_fleet places its 1-node allocations: three under leaf-0, two under leaf-1.
HELD = ("node-000", "node-002", "node-004", "node-008", "node-009")
LEAF_0 = tuple(f"node-{i:03d}" for i in range(8))
LEAF_1 = tuple(f"node-{i:03d}" for i in range(8, 16))

# Conversions ----------------------------------------------------------------------------------


def test_a_pool_reads_with_its_model_and_node_states_by_name_and_its_nodes_in_order() -> None:
    message = node_pb2.PoolFragmentation(
        gpu_model=node_pb2.GPU_MODEL_H100,
        nodes=3,
        free_nodes=1,
        free_gpus=8,
        largest_free_block=1,
        stranded_gpus=8,
        node_capacity=[
            node_pb2.NodeCapacity(
                node_id="n-2", leaf_switch="leaf-0", state=node_pb2.NODE_STATE_ALLOCATED, allocation_id="alloc-1"
            ),
            node_pb2.NodeCapacity(node_id="n-1", leaf_switch="leaf-0", state=node_pb2.NODE_STATE_READY, free_gpus=8),
            node_pb2.NodeCapacity(node_id="n-3", leaf_switch="leaf-1", state=node_pb2.NODE_STATE_READY, stranded=True),
        ],
    )
    assert convert.pool_fragmentation(message) == PoolFragmentation(
        gpu_model="H100",
        nodes=3,
        free_nodes=1,
        free_gpus=8,
        largest_free_block=1,
        stranded_gpus=8,
        node_capacity=(
            NodeCapacity("n-2", "leaf-0", "ALLOCATED", 0, False, "alloc-1"),
            NodeCapacity("n-1", "leaf-0", "READY", 8, False, None),
            NodeCapacity("n-3", "leaf-1", "READY", 0, True, None),
        ),
    )


def test_an_empty_pool_message_reads_as_zeros_and_an_unknown_state_by_its_number() -> None:
    newer = node_pb2.NodeCapacity(state=node_pb2.NodeState.ValueType(99))
    read = convert.pool_fragmentation(node_pb2.PoolFragmentation(node_capacity=[newer]))
    assert (read.gpu_model, read.nodes, read.free_gpus, read.largest_free_block) == ("UNSPECIFIED", 0, 0, 0)
    assert read.node_capacity[0].state == "UNKNOWN_99"
    assert read.node_capacity[0].allocation_id is None


def test_a_plan_reads_its_switches_moves_and_costs_in_the_servers_order() -> None:
    message = node_pb2.PlanDefragmentationResponse(
        freed_leaf_switches=["leaf-3", "leaf-1"],
        moves=[
            node_pb2.DefragmentationMove(allocation_id="a-2", tenant_id="beta", from_node_id="n-9", to_node_id="n-1"),
            node_pb2.DefragmentationMove(allocation_id="a-1", tenant_id="acme", from_node_id="n-8", to_node_id="n-3"),
        ],
        costs=[
            node_pb2.DefragmentationCost(allocation_id="a-2", tenant_id="beta", nodes_moved=1, node_count=2),
            node_pb2.DefragmentationCost(allocation_id="a-1", tenant_id="acme", nodes_moved=1, node_count=1),
        ],
        summary="moving 2 node(s) of 2 allocation(s) frees leaf-3, leaf-1 whole",
    )
    assert convert.defragmentation_plan(message) == DefragmentationPlan(
        freed_leaf_switches=("leaf-3", "leaf-1"),
        moves=(DefragmentationMove("a-2", "beta", "n-9", "n-1"), DefragmentationMove("a-1", "acme", "n-8", "n-3")),
        costs=(DefragmentationCost("a-2", "beta", 1, 2), DefragmentationCost("a-1", "acme", 1, 1)),
        summary="moving 2 node(s) of 2 allocation(s) frees leaf-3, leaf-1 whole",
    )


def test_no_plan_reads_as_empty_with_its_reason() -> None:
    plan = convert.defragmentation_plan(node_pb2.PlanDefragmentationResponse(summary="no leaf switch can be freed"))
    assert plan == DefragmentationPlan((), (), (), "no leaf switch can be freed")


# Against a server -----------------------------------------------------------------------------


async def partly_held_fleet(operator: AsyncClient) -> list[str]:
    """16 READY H100 nodes, node-000..007 under leaf-0 and node-008..015 under leaf-1, with a
    1-node allocation on each of ``HELD`` (tenants acme and beta in turn): each switch partly
    used. The allocations' ids, in ``HELD``'s order."""
    await register_ready_nodes(operator, 16)
    for tenant_id in ("acme", "beta"):
        await operator.create_tenant(tenant_id)
    # First fit takes free nodes in fabric order: the nodes cordoned meanwhile steer it to HELD.
    skipped = [node_id for node_id in LEAF_0 if node_id not in HELD]
    for node_id in skipped:
        await operator.cordon_node(node_id, "steering the test's placements")
    ids = []
    for i, node_id in enumerate(HELD):
        made = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id=("acme", "beta")[i % 2])
        assert made.node_ids == (node_id,)
        ids.append(made.allocation_id)
    for node_id in skipped:
        await operator.uncordon_node(node_id)
    return ids


async def test_fragmentation_counts_free_nodes_per_switch_and_the_stranded_ones(operator: AsyncClient) -> None:
    allocation_ids = await partly_held_fleet(operator)
    [pool] = await operator.get_fragmentation()
    assert (pool.gpu_model, pool.nodes, pool.free_nodes, pool.free_gpus) == ("H100", 16, 11, 88)
    # leaf-0 has 5 free, leaf-1 6: a same-block gang of 6 fits now, one of 7 does not.
    assert (pool.largest_free_block, pool.stranded_gpus) == (6, 0)
    assert [n.node_id for n in pool.node_capacity] == [*LEAF_0, *LEAF_1]
    assert [n.leaf_switch for n in pool.node_capacity] == ["leaf-0"] * 8 + ["leaf-1"] * 8
    held = {n.node_id: n.allocation_id for n in pool.node_capacity if n.allocation_id}
    assert held == dict(zip(HELD, allocation_ids, strict=True))
    assert {n.state for n in pool.node_capacity if n.allocation_id} == {"ALLOCATED"}
    assert all(n.free_gpus == (0 if n.allocation_id else 8) for n in pool.node_capacity)

    # A cordoned READY node is free and no allocation can have it: stranded.
    await operator.cordon_node("node-015", "fan fault")
    [pool] = await operator.get_fragmentation()
    assert (pool.free_nodes, pool.free_gpus, pool.largest_free_block, pool.stranded_gpus) == (10, 80, 5, 8)
    [stranded] = [n for n in pool.node_capacity if n.stranded]
    assert (stranded.node_id, stranded.state, stranded.free_gpus, stranded.allocation_id) == (
        "node-015",
        "READY",
        0,
        None,
    )


async def test_a_fleet_without_nodes_has_no_pools(operator: AsyncClient) -> None:
    assert await operator.get_fragmentation() == []


async def test_the_plan_frees_the_cheaper_switch_and_nothing_moves(operator: AsyncClient) -> None:
    allocation_ids = await partly_held_fleet(operator)
    nodes_before = [(n.node_id, n.state, n.allocation_id) for n in await operator.list_nodes()]
    allocations_before = {a.allocation_id: a.node_ids for a in await operator.list_allocations()}

    plan = await operator.plan_defragmentation("h100")
    # leaf-1 holds 2 nodes of small allocations, leaf-0 3: leaf-1 is the cheaper to free, its
    # two nodes moving to leaf-0's free ones.
    assert plan.freed_leaf_switches == ("leaf-1",)
    on_leaf_1 = dict(zip(HELD, allocation_ids, strict=True))
    assert [(m.allocation_id, m.from_node_id) for m in plan.moves] == [
        (on_leaf_1["node-008"], "node-008"),
        (on_leaf_1["node-009"], "node-009"),
    ]
    assert {m.to_node_id for m in plan.moves} <= set(LEAF_0) - set(HELD)
    assert len({m.to_node_id for m in plan.moves}) == 2
    assert [(c.allocation_id, c.tenant_id, c.nodes_moved, c.node_count) for c in plan.costs] == [
        (on_leaf_1["node-008"], "beta", 1, 1),
        (on_leaf_1["node-009"], "acme", 1, 1),
    ]
    assert "leaf-1" in plan.summary

    # A plan only: every node and allocation stands as it did.
    assert [(n.node_id, n.state, n.allocation_id) for n in await operator.list_nodes()] == nodes_before
    assert {a.allocation_id: a.node_ids for a in await operator.list_allocations()} == allocations_before
    [pool] = await operator.get_fragmentation()
    assert (pool.free_nodes, pool.largest_free_block) == (11, 6)


async def test_a_plan_leaves_the_pools_spares_free(operator: AsyncClient) -> None:
    await partly_held_fleet(operator)
    # 11 free nodes, 10 kept as spares: one move at most, and leaf-1 needs two.
    await operator.set_spare_pool("H100", 10)
    plan = await operator.plan_defragmentation("H100")
    assert (plan.freed_leaf_switches, plan.moves) == ((), ())
    assert "at most 1 move(s) now" in plan.summary
    await operator.set_spare_pool("H100", 9)
    assert (await operator.plan_defragmentation("H100")).freed_leaf_switches == ("leaf-1",)


async def test_a_plan_frees_no_more_switches_than_can_be_and_says_so(operator: AsyncClient) -> None:
    await partly_held_fleet(operator)
    # Once leaf-1's nodes go to leaf-0, leaf-0 cannot be freed too.
    plan = await operator.plan_defragmentation("H100", blocks=2)
    assert plan.freed_leaf_switches == ("leaf-1",)
    assert "only 1 of the 2 asked" in plan.summary
    # 0 is the server's default for both: 1 switch, allocations of up to 4 nodes.
    assert await operator.plan_defragmentation("H100", blocks=0, max_allocation_nodes=0) == (
        await operator.plan_defragmentation("H100")
    )


async def test_a_pool_with_nothing_held_has_no_plan_and_says_why(operator: AsyncClient) -> None:
    await register_ready_nodes(operator, 16)
    plan = await operator.plan_defragmentation("H100")
    assert (plan.freed_leaf_switches, plan.moves, plan.costs) == ((), (), ())
    assert "2 leaf switch(es) already wholly free" in plan.summary


async def test_bad_plan_values_are_refused_naming_the_field(operator: AsyncClient) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        await operator.plan_defragmentation("H100", blocks=-1, max_allocation_nodes=10_001)
    assert set(refused.value.field_violations) == {"blocks", "max_allocation_nodes"}
    with pytest.raises(InvalidValueError, match="unknown GPU model 'H999'"):
        await operator.plan_defragmentation("H999")


async def test_a_tenant_may_neither_read_fragmentation_nor_plan(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    token = (await operator.create_tenant("acme")).token
    async with control_plane.client(token) as tenant:
        with pytest.raises(PermissionDeniedError):
            await tenant.get_fragmentation()
        with pytest.raises(PermissionDeniedError):
            await tenant.plan_defragmentation("H100")
        with pytest.raises(PermissionDeniedError):
            await tenant.apply_defragmentation([DefragmentationMove("alloc-1", "", "node-000", "node-001")])


async def test_the_blocking_client_reads_fragmentation_and_plans_too(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 2)
    # In a thread: the blocking calls must not hold up the loop the server runs on.
    with Client(control_plane.address, control_plane.operator_token) as client:
        [pool] = await asyncio.to_thread(client.get_fragmentation)
        assert (pool.nodes, pool.free_nodes, pool.largest_free_block) == (2, 2, 2)
        plan = await asyncio.to_thread(client.plan_defragmentation, "H100", blocks=1)
        assert plan.moves == ()
        await operator.create_tenant("acme")
        held = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
        move = DefragmentationMove(held.allocation_id, "", "node-000", "node-001")
        done = await asyncio.to_thread(client.apply_defragmentation, [move])
        assert (done.moves, done.made) == (
            (DefragmentationMove(held.allocation_id, "acme", "node-000", "node-001"),),
            1,
        )


async def test_a_go_the_fleet_no_longer_allows_moves_nothing_and_names_the_move(operator: AsyncClient) -> None:
    allocation_ids = await partly_held_fleet(operator)
    plan = await operator.plan_defragmentation("H100")
    first, second = plan.moves
    await operator.cordon_node(second.to_node_id, "a bad cable found after the plan")
    with pytest.raises(FailedPreconditionError) as stale:
        await operator.apply_defragmentation(plan.moves)
    assert (stale.value.reason, stale.value.metadata["field"]) == ("MOVE_NO_LONGER_POSSIBLE", "moves[1].to_node_id")
    assert f"{second.to_node_id} is no longer free (cordoned)" in stale.value.message
    # All or none: the first move, possible on its own, was not made either.
    assert (await operator.get_allocation(first.allocation_id)).node_ids == ("node-008",)
    assert (await operator.get_node(first.to_node_id)).state == "READY"

    await operator.uncordon_node(second.to_node_id)
    done = await operator.apply_defragmentation(plan.moves)
    assert done.made == 2
    on = dict(zip(HELD, allocation_ids, strict=True))
    assert (await operator.get_allocation(on["node-009"])).node_ids == (second.to_node_id,)


async def test_a_same_block_allocation_moves_only_whole_under_one_switch(operator: AsyncClient) -> None:
    await register_ready_nodes(operator, 16)
    await operator.create_tenant("acme")
    gang = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme", same_block=True)
    assert gang.node_ids == ("node-000", "node-001")
    half = [DefragmentationMove(gang.allocation_id, "", "node-000", "node-008")]
    with pytest.raises(FailedPreconditionError) as split:
        await operator.apply_defragmentation(half)
    assert (split.value.reason, split.value.metadata["field"]) == ("SAME_BLOCK_SPLIT", "moves[0].to_node_id")
    assert "leaf-0, leaf-1" in split.value.message
    whole = [*half, DefragmentationMove(gang.allocation_id, "", "node-001", "node-009")]
    assert (await operator.apply_defragmentation(whole)).made == 2
    assert (await operator.get_allocation(gang.allocation_id)).node_ids == ("node-008", "node-009")


async def test_an_allocation_never_moves_back_nor_part_of_a_node(operator: AsyncClient) -> None:
    await register_ready_nodes(operator, 3)
    await operator.create_tenant("acme")
    held = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    await operator.apply_defragmentation([DefragmentationMove(held.allocation_id, "", "node-000", "node-001")])

    async def scrubbed() -> bool:
        return (await operator.get_node("node-000")).state == "READY"

    await until(scrubbed, timeout=20)
    with pytest.raises(FailedPreconditionError) as back:
        await operator.apply_defragmentation([DefragmentationMove(held.allocation_id, "", "node-001", "node-000")])
    assert back.value.metadata["field"] == "moves[0].to_node_id"
    assert f"allocation {held.allocation_id} held node-000 before" in back.value.message

    part = await operator.create_allocation(gpu_model="H100", gpus=2, tenant_id="acme")
    assert part.node_ids == ("node-000",)
    with pytest.raises(FailedPreconditionError, match="holds part of a node: only whole nodes move"):
        await operator.apply_defragmentation([DefragmentationMove(part.allocation_id, "", "node-000", "node-002")])

"""What each pool's free capacity looks like in the fabric, read for GetFragmentation and
PlanDefragmentation (operators); the plan itself is defrag.py's."""

from __future__ import annotations

from dataclasses import dataclass

from services.allocations import spares
from services.allocations.defrag import DefragPlan, Held, NodeSlot, plan
from services.allocations.relocation import MAX_MOVES
from services.allocations.states import AllocationState
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GPUS_PER_NODE, GpuModel
from services.nodes.transitions import NodeState
from services.store.tx import Sql, Tx


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """A node in service: where it is, its state, and what of it is free."""

    node_id: str
    leaf_switch: str
    state: str
    free: bool
    # READY but cordoned or unreachable: free, and no allocation can have it.
    stranded: bool
    allocation_id: str
    # Held by part-node allocations (part_node.py), and how many of its GPUs none of them holds.
    shared: bool = False
    shared_free_gpus: int = 0

    @property
    def free_gpus(self) -> int:
        """Whole GPUs free: all of a free node's, those of a shared node none of its part-node
        allocations holds (while it takes placements), none otherwise."""
        return GPUS_PER_NODE if self.free else self.shared_free_gpus


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    """A pool's free capacity, and every node of it in service in fabric order."""

    gpu_model: str
    nodes: list[NodeCapacity]

    @property
    def free_nodes(self) -> int:
        """READY, placeable nodes."""
        return sum(n.free for n in self.nodes)

    @property
    def free_gpus(self) -> int:
        """Whole GPUs free, on free nodes and on shared ones."""
        return sum(n.free_gpus for n in self.nodes)

    @property
    def shared_nodes(self) -> int:
        """Nodes held by part-node allocations."""
        return sum(n.shared for n in self.nodes)

    @property
    def largest_free_block(self) -> int:
        """The most free nodes under one leaf switch."""
        per_switch: dict[str, int] = {}
        for n in self.nodes:
            per_switch[n.leaf_switch] = per_switch.get(n.leaf_switch, 0) + n.free
        return max(per_switch.values(), default=0)

    @property
    def stranded_gpus(self) -> int:
        """Free GPUs no allocation can use."""
        return GPUS_PER_NODE * sum(n.stranded for n in self.nodes)


def pool(gpu_model: GpuModel) -> Tx[PoolCapacity]:
    """``gpu_model``'s nodes in service, with the allocation holding each (a shared node's
    part-node allocations are not named: there may be many), and the GPUs free on shared ones."""
    result = yield Sql(
        "SELECT n.node_id, n.leaf_switch, n.state, n.cordoned, n.unreachable, a.allocation_id, h.held FROM nodes n"
        " LEFT JOIN assignments a ON a.node_id = n.node_id AND a.released_us IS NULL"
        " LEFT JOIN (SELECT node_id, COUNT(DISTINCT CASE WHEN gpu_index >= 0 THEN gpu_index END) AS held"
        " FROM gpu_holds WHERE released_us IS NULL GROUP BY node_id) h ON h.node_id = n.node_id"
        f" WHERE n.gpu_model = :model AND n.state <> :retired ORDER BY {nodes_repo.fabric_order('n')}",
        {"model": gpu_model.value, "retired": NodeState.RETIRED.value},
    )
    nodes = []
    for node_id, leaf, state, cordoned, unreachable, allocation_id, held in result.rows:
        ready = state == NodeState.READY.value
        unplaceable = bool(cordoned) or bool(unreachable)
        # A shared node's free GPUs count while it takes placements: ALLOCATED and placeable.
        open_to_more = held is not None and state == NodeState.ALLOCATED.value and not unplaceable
        nodes.append(
            NodeCapacity(
                str(node_id),
                str(leaf),
                str(state),
                ready and not unplaceable,
                ready and unplaceable,
                allocation_id or "",
                shared=held is not None,
                shared_free_gpus=GPUS_PER_NODE - int(held) if open_to_more else 0,
            )
        )
    return PoolCapacity(gpu_model.value, nodes)


def pools() -> Tx[list[PoolCapacity]]:
    """Every model with nodes in service, in ``GpuModel``'s order."""
    found = []
    for model in GpuModel:
        capacity = yield from pool(model)
        if capacity.nodes:
            found.append(capacity)
    return found


def defragmentation(
    gpu_model: GpuModel, *, blocks: int, max_allocation_nodes: int
) -> Tx[tuple[DefragPlan, dict[str, Held]]]:
    """The plan that frees ``blocks`` of ``gpu_model``'s leaf switches, and the allocations it
    may move (for their costs)."""
    capacity = yield from pool(gpu_model)
    active = {"model": gpu_model.value, "active": AllocationState.ACTIVE.value}
    result = yield Sql(
        "SELECT allocation_id, tenant_id, node_count, same_block FROM allocations"
        " WHERE gpu_model = :model AND state = :active AND node_count > 0",
        active,
    )
    ever = yield Sql(
        "SELECT a.allocation_id, a.node_id FROM assignments a JOIN allocations al"
        " ON al.allocation_id = a.allocation_id WHERE al.gpu_model = :model AND al.state = :active",
        active,
    )
    held_before: dict[str, set[str]] = {}
    for allocation_id, node_id in ever.rows:
        held_before.setdefault(str(allocation_id), set()).add(str(node_id))
    held = {
        str(a): Held(str(t), int(n), bool(same), frozenset(held_before.get(str(a), ())))
        for a, t, n, same in result.rows
    }
    flagged = yield Sql(
        "SELECT node_id, state, cordoned, drain_pending FROM nodes WHERE gpu_model = :model"
        " AND (state = :scrubbing OR cordoned = TRUE OR drain_pending = TRUE)",
        {"model": gpu_model.value, "scrubbing": NodeState.SCRUBBING.value},
    )
    # Cordoned or drained, a node stays out of the pool once left; scrubbing, the others come back.
    stuck = {str(node_id) for node_id, _, cordoned, drained in flagged.rows if cordoned or drained}
    freeing = {str(r[0]) for r in flagged.rows if r[1] == NodeState.SCRUBBING.value} - stuck
    slots = [
        # A node held by an allocation no longer ACTIVE (being released) is not movable.
        NodeSlot(
            n.node_id,
            n.leaf_switch,
            n.free,
            n.allocation_id if n.allocation_id in held else "",
            freeing=n.node_id in freeing,
            stuck=n.node_id in stuck,
        )
        for n in capacity.nodes
    ]
    # Each move holds a free node until the one it left is scrubbed: the spares stay free.
    reserve = yield from spares.reserve(gpu_model, locking=False)
    max_moves = min(MAX_MOVES, max(0, capacity.free_nodes - reserve))
    return plan(slots, held, blocks=blocks, max_allocation_nodes=max_allocation_nodes, max_moves=max_moves), held

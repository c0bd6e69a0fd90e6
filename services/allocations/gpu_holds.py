"""Persistence of part-node allocations' holds (``gpu_holds``) and of the shared nodes they are on.

Transaction steps (store/tx.py), as in repository.py. Holds are written by the scheduling
cycle alone (scheduler.py, on the fleet's leader) and released by the releaser once the
allocation's cancel is due, so no two transactions place on one GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from services.allocations import repository as repo
from services.allocations.part_node import LiveHold, PartPlacement
from services.allocations.placement import Candidate
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel
from services.nodes.transitions import NodeState
from services.store.tx import Sql, Tx, expand, for_update

_SHARED = (
    "FROM gpu_holds h JOIN nodes n ON n.node_id = h.node_id JOIN allocations a ON a.allocation_id = h.allocation_id"
    f" WHERE h.released_us IS NULL AND n.gpu_model = :model AND n.state = :allocated AND n.{nodes_repo.PLACEABLE}"
)


def shared(gpu_model: GpuModel) -> Tx[tuple[list[Candidate], list[LiveHold]]]:
    """The model's shared nodes that take placements (ALLOCATED, uncordoned, reachable), in
    fabric order, and every live hold on them."""
    params = {"model": gpu_model.value, "allocated": NodeState.ALLOCATED.value}
    columns = ", ".join(f"a.{c.strip()}" for c in repo.COLUMNS.split(","))
    result = yield Sql(
        f"SELECT n.zone, n.rack, n.leaf_switch, n.node_id, h.gpu_index, h.mig_start, {columns} {_SHARED}"
        f" ORDER BY {nodes_repo.fabric_order('n')}, h.allocation_id, h.gpu_index",
        params,
    )
    nodes: dict[str, Candidate] = {}
    holds = []
    for r in result.rows:
        node = Candidate(str(r[0]), str(r[1]), str(r[2]), str(r[3]))
        nodes.setdefault(node.node_id, node)
        holds.append(LiveHold(repo.row_of(r[6:]), node.node_id, int(r[4]), int(r[5])))
    return list(nodes.values()), holds


def insert(placed: Sequence[PartPlacement], *, now_us: int) -> Tx[None]:
    """The holds of admitted part-node allocations: one per GPU (one with index -1 for CPU and
    memory alone)."""
    rows = [
        {
            "allocation_id": p.row.allocation_id,
            "tenant_id": p.row.tenant_id,
            "node_id": p.node_id,
            "gpu_index": gpu,
            "milli": p.milli,
            "mig_start": p.mig_start,
            "assigned_us": now_us,
        }
        for p in placed
        for gpu in (p.gpus or (-1,))
    ]
    if rows:
        yield Sql(
            "INSERT INTO gpu_holds (allocation_id, tenant_id, node_id, gpu_index, milli, mig_start, assigned_us)"
            " VALUES (:allocation_id, :tenant_id, :node_id, :gpu_index, :milli, :mig_start, :assigned_us)",
            rows=rows,
        )


class Emptied(NamedTuple):
    """A shared node whose last hold was released: it leaves for its scrub."""

    node_id: str
    node_state: NodeState
    agent_managed: bool


def release(allocation_ids: Sequence[str], *, now_us: int, locking: bool) -> Tx[list[Emptied]]:
    """End the allocations' live holds at ``now_us``; the nodes left with none, locked (so a
    cycle placing on one waits, then finds it no longer shared)."""
    ids, params = expand("id", allocation_ids)
    touched = yield Sql(
        f"SELECT DISTINCT node_id FROM gpu_holds WHERE allocation_id IN ({ids}) AND released_us IS NULL", params
    )
    node_ids = sorted(str(r[0]) for r in touched.rows)
    if not node_ids:
        return []
    nodes, node_params = expand("node", node_ids)
    yield Sql(
        f"SELECT node_id FROM nodes WHERE node_id IN ({nodes}) ORDER BY {nodes_repo.fabric_order()}"
        + for_update(locking),
        node_params,
    )
    yield Sql(
        f"UPDATE gpu_holds SET released_us = :now WHERE allocation_id IN ({ids}) AND released_us IS NULL",
        {**params, "now": now_us},
    )
    result = yield Sql(
        f"SELECT node_id, state, agent_managed FROM nodes WHERE node_id IN ({nodes}) AND NOT EXISTS"
        " (SELECT 1 FROM gpu_holds h WHERE h.node_id = nodes.node_id AND h.released_us IS NULL)",
        node_params,
    )
    return [Emptied(str(r[0]), NodeState(str(r[1])), bool(r[2])) for r in result.rows]

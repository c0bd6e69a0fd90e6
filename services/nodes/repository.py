"""Persistence of nodes, their GPUs and their state history, as transaction steps
(store/tx.py). The only module that writes them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.errors import Aborted, NotFound
from services.nodes.inventory import GpuModel, Inventory, canonical_gpu_uuid
from services.nodes.transitions import NodeEvent, NodeState, next_state
from services.store.tx import Sql, Tx, expand, for_update


@dataclass(frozen=True)
class NodeFilter:
    """ListNodes' filters; None (or "" for the zone) matches everything."""

    state: NodeState | None = None
    gpu_model: GpuModel | None = None
    zone: str = ""


@dataclass(frozen=True, slots=True)
class Node:
    """One row of the ``nodes`` table (store/models.py defines the table)."""

    node_id: str
    gpu_model: str
    zone: str
    rack: str
    leaf_switch: str
    state: str
    cordoned: bool
    status_reason: str
    drain_pending: bool
    created_us: int
    state_changed_us: int
    # Registered by its agent (services/fleet/), which does its burn-in and scrub.
    agent_managed: bool = False
    # Marked by the node reconciler after too many missed heartbeats; placement skips it.
    unreachable: bool = False


@dataclass(frozen=True, slots=True)
class GpuDetails:
    """What an agent reports a GPU to be, beyond its identity; None where not reported."""

    name: str | None = None
    serial: str | None = None
    memory_bytes: int | None = None
    driver_version: str | None = None
    vbios_version: str | None = None
    inforom_version: str | None = None
    rail: int | None = None


@dataclass(frozen=True, slots=True)
class Gpu:
    """One row of the ``gpus`` table: a GPU of a node, by its UUID, with its index on the node."""

    gpu_uuid: str
    node_id: str
    gpu_index: int
    details: GpuDetails = GpuDetails()


@dataclass(frozen=True, slots=True)
class NodeEventEntry:
    """One row of the ``node_events`` table: a recorded change of a node, with its cause."""

    event_seq: int
    node_id: str
    event: str
    from_state: str
    to_state: str
    reason: str
    actor: str
    at_us: int


@dataclass(frozen=True)
class NodeView:
    """A node with its GPUs and the allocation holding it, as the API shows it."""

    row: Node
    gpus: tuple[Gpu, ...]
    allocation_id: str | None


_COLUMNS = (
    "node_id, gpu_model, zone, rack, leaf_switch, state, cordoned, status_reason, drain_pending, created_us,"
    " state_changed_us, agent_managed, unreachable"
)
GPU_DETAIL_COLUMNS = "name, serial, memory_bytes, driver_version, vbios_version, inforom_version, rail"
EVENT_COLUMNS = "event_seq, node_id, event, from_state, to_state, reason, actor, at_us"


def _node(values: Sequence[Any]) -> Node:
    node_id, gpu_model, zone, rack, leaf, state, cordoned, status_reason, drain_pending, created, changed = values[:11]
    agent_managed, unreachable = values[11:]
    # SQLite hands booleans back as 0/1.
    return Node(
        node_id,
        gpu_model,
        zone,
        rack,
        leaf,
        state,
        bool(cordoned),
        status_reason,
        bool(drain_pending),
        created,
        changed,
        bool(agent_managed),
        bool(unreachable),
    )


def find(node_id: str, *, locking: bool = False) -> Tx[Node | None]:
    """The node, locked for the transaction when ``locking`` (PostgreSQL); None if unknown."""
    sql = f"SELECT {_COLUMNS} FROM nodes WHERE node_id = :id" + for_update(locking)
    found = (yield Sql(sql, {"id": node_id})).first()
    return None if found is None else _node(found)


def get_row(node_id: str, *, locking: bool = False) -> Tx[Node]:
    """The node, locked for the transaction when ``locking`` (PostgreSQL); NOT_FOUND if unknown."""
    row = yield from find(node_id, locking=locking)
    if row is None:
        raise NotFound.of("node", node_id, field_path="node_id")
    return row


def views(rows: Sequence[Node]) -> Tx[list[NodeView]]:
    """Attach GPUs and live allocations to node rows in two queries."""
    if not rows:
        return []
    ids, params = expand("id", [r.node_id for r in rows])
    gpus: dict[str, list[Gpu]] = {r.node_id: [] for r in rows}
    result = yield Sql(
        f"SELECT gpu_uuid, node_id, gpu_index, {GPU_DETAIL_COLUMNS} FROM gpus WHERE node_id IN ({ids})"
        " ORDER BY gpu_index",
        params,
    )
    for gpu_uuid, node_id, gpu_index, *details in result.rows:
        gpus[node_id].append(Gpu(gpu_uuid, node_id, gpu_index, GpuDetails(*details)))
    result = yield Sql(
        f"SELECT node_id, allocation_id FROM assignments WHERE node_id IN ({ids}) AND released_us IS NULL", params
    )
    held = {str(node_id): str(allocation_id) for node_id, allocation_id in result.rows}
    return [NodeView(r, tuple(gpus[r.node_id]), held.get(r.node_id)) for r in rows]


def get_view(node_id: str) -> Tx[NodeView]:
    """The node with its GPUs and the allocation holding it; NOT_FOUND if unknown."""
    row = yield from get_row(node_id)
    return (yield from views([row]))[0]


def insert(inventory: Inventory, *, actor: str, now_us: int) -> Tx[Node]:
    """Add a REGISTERED node, its GPUs and its REGISTER event; returns the row. A node or GPU
    registered already (by a concurrent registration) is ``tx.Refused``."""
    row = Node(
        node_id=inventory.node_id,
        gpu_model=inventory.gpu_model.value,
        zone=inventory.zone,
        rack=inventory.rack,
        leaf_switch=inventory.leaf_switch,
        state=NodeState.REGISTERED.value,
        cordoned=False,
        status_reason="",
        drain_pending=False,
        created_us=now_us,
        state_changed_us=now_us,
    )
    yield Sql(
        f"INSERT INTO nodes ({_COLUMNS}) VALUES (:node_id, :gpu_model, :zone, :rack, :leaf_switch, :state,"
        " :cordoned, :status_reason, :drain_pending, :created_us, :state_changed_us, :agent_managed, :unreachable)",
        dataclasses.asdict(row),
    )
    if inventory.gpus:
        yield Sql(
            "INSERT INTO gpus (gpu_uuid, node_id, gpu_index) VALUES (:uuid, :node_id, :index)",
            rows=[{"uuid": g.uuid, "node_id": inventory.node_id, "index": g.index} for g in inventory.gpus],
        )
    yield from record_event(row, NodeEvent.REGISTER, reason="registered", actor=actor, now_us=now_us)
    return row


def save(row: Node) -> Tx[None]:
    """Write what may change of a node: its state, cordon, drain and status reason."""
    yield Sql(
        "UPDATE nodes SET state = :state, state_changed_us = :changed, cordoned = :cordoned,"
        " drain_pending = :drain_pending, status_reason = :reason WHERE node_id = :id",
        {
            "state": row.state,
            "changed": row.state_changed_us,
            "cordoned": row.cordoned,
            "drain_pending": row.drain_pending,
            "reason": row.status_reason,
            "id": row.node_id,
        },
    )


def record_event(
    row: Node,
    event: NodeEvent,
    *,
    reason: str,
    actor: str,
    now_us: int,
    before: NodeState | None = None,
) -> Tx[None]:
    """Add ``event`` to the node's history: from ``before`` (default: its state now, as for the
    events that move no state) to the state ``row`` is in."""
    after = NodeState(row.state)
    yield Sql(
        "INSERT INTO node_events (node_id, event, from_state, to_state, reason, actor, at_us)"
        " VALUES (:node_id, :event, :from_state, :to_state, :reason, :actor, :at_us)",
        {
            "node_id": row.node_id,
            "event": event.value,
            "from_state": (after if before is None else before).value,
            "to_state": after.value,
            "reason": reason[:256],
            "actor": actor,
            "at_us": now_us,
        },
    )


def gpu_owners(uuids: Sequence[str]) -> Tx[dict[str, str]]:
    """Which node already owns each of ``uuids`` (canonical, see ``canonical_gpu_uuid``), in
    whatever case it was stored: rows from before UUIDs were made canonical count too.

    Looked up by ``lower(gpu_uuid)``, which index ``ix_gpus_uuid_lower`` serves."""
    if not uuids:
        return {}
    ids, params = expand("uuid", [uuid.lower() for uuid in uuids])
    result = yield Sql(f"SELECT gpu_uuid, node_id FROM gpus WHERE lower(gpu_uuid) IN ({ids})", params)
    return {canonical_gpu_uuid(uuid): str(node_id) for uuid, node_id in result.rows}


def apply(row: Node, event: NodeEvent, *, reason: str, actor: str, now_us: int) -> Tx[Node]:
    """Move ``row`` (with any cordon, drain or status reason the caller set on it) through the
    transition table, write it and record why; returns the node as written. Raises
    IllegalTransition before writing anything."""
    before = NodeState(row.state)
    after = next_state(row.node_id, before, event)
    moved = dataclasses.replace(
        row, state=after.value, state_changed_us=row.state_changed_us if after is before else now_us
    )
    yield from save(moved)
    yield from record_event(moved, event, reason=reason, actor=actor, now_us=now_us, before=before)
    return moved


@dataclass(frozen=True)
class Move:
    """One node to move in a bulk transition: its id, the state it was read in, the event."""

    node_id: str
    state: NodeState
    event: NodeEvent
    # Override the call's reason and actor for this node's event.
    reason: str | None = None
    actor: str | None = None


def apply_many(
    moves: Sequence[Move],
    *,
    reason: str,
    actor: str,
    now_us: int,
    uncordoned_only: bool = False,
) -> Tx[None]:
    """Move several nodes through the transition table in a few statements (the hot path of
    placement and release), recording an event for each.

    Each UPDATE is guarded by the state the node was read in, so a node changed by a concurrent
    transaction is not overwritten: the whole call fails with Aborted and rolls back. Placement
    passes ``uncordoned_only`` so that a cordon committed meanwhile also stops it.
    """
    if not moves:
        return
    targets = [next_state(m.node_id, m.state, m.event) for m in moves]
    groups: dict[tuple[NodeState, NodeState], list[str]] = {}
    for move, target in zip(moves, targets, strict=True):
        groups.setdefault((move.state, target), []).append(move.node_id)
    for (before, after), node_ids in groups.items():
        ids, params = expand("id", node_ids)
        guard = f" AND {PLACEABLE}" if uncordoned_only else ""
        result = yield Sql(
            f"UPDATE nodes SET state = :after, state_changed_us = :now WHERE node_id IN ({ids}) AND state = :before"
            + guard,
            {**params, "after": after.value, "before": before.value, "now": now_us},
        )
        if result.rowcount != len(node_ids):
            raise Aborted(
                reason="NODE_CHANGED_CONCURRENTLY",
                message="a node changed state while this request ran; retry it",
                metadata={"node_ids": ",".join(node_ids)},
            )
    yield Sql(
        "INSERT INTO node_events (node_id, event, from_state, to_state, reason, actor, at_us)"
        " VALUES (:node_id, :event, :from_state, :to_state, :reason, :actor, :at_us)",
        rows=[
            {
                "node_id": m.node_id,
                "event": m.event.value,
                "from_state": m.state.value,
                "to_state": t.value,
                "reason": (m.reason or reason)[:256],
                "actor": m.actor or actor,
                "at_us": now_us,
            }
            for m, t in zip(moves, targets, strict=True)
        ],
    )


def list_page(flt: NodeFilter, *, after_id: str | None, limit: int) -> Tx[list[Node]]:
    """Nodes ordered by id (immutable and unique, so the keyset needs no tiebreaker)."""
    where = ["TRUE"]
    params: dict[str, Any] = {"limit": limit}
    if flt.state is not None:
        where.append("state = :state")
        params["state"] = flt.state.value
    if flt.gpu_model is not None:
        where.append("gpu_model = :model")
        params["model"] = flt.gpu_model.value
    if flt.zone:
        where.append("zone = :zone")
        params["zone"] = flt.zone
    if after_id is not None:
        where.append("node_id > :after")
        params["after"] = after_id
    result = yield Sql(
        f"SELECT {_COLUMNS} FROM nodes WHERE {' AND '.join(where)} ORDER BY node_id LIMIT :limit", params
    )
    return [_node(r) for r in result.rows]


def list_views(flt: NodeFilter, *, after_id: str | None, limit: int) -> Tx[list[NodeView]]:
    """``list_page`` with each node's GPUs and live allocation attached."""
    rows = yield from list_page(flt, after_id=after_id, limit=limit)
    return (yield from views(rows))


def events(node_id: str, *, after_seq: int | None, limit: int) -> Tx[list[NodeEventEntry]]:
    """A node's events oldest first, after ``after_seq`` (the keyset: a unique, immutable id);
    NOT_FOUND if the node is unknown."""
    yield from get_row(node_id)
    sql = f"SELECT {EVENT_COLUMNS} FROM node_events WHERE node_id = :id"
    params: dict[str, Any] = {"id": node_id, "limit": limit}
    if after_seq is not None:
        sql += " AND event_seq > :after"
        params["after"] = after_seq
    result = yield Sql(sql + " ORDER BY event_seq LIMIT :limit", params)
    return [NodeEventEntry(*r) for r in result.rows]


# What, beside being READY, a node needs for placement to pick it: not cordoned by an operator,
# and not marked unreachable by the node reconciler.
PLACEABLE = "cordoned = FALSE AND unreachable = FALSE"


def fabric_order(table: str = "") -> str:
    """The ``ORDER BY`` terms of placement order: zone, rack, leaf switch, then id.

    It is also the order every statement that locks several nodes locks them in (PostgreSQL
    locks the rows of ``ORDER BY ... FOR UPDATE`` as it returns them). Two transactions that
    take their nodes' locks in one order cannot deadlock over them; a release that locked its
    nodes in allocation order deadlocked with creates waiting in this one.
    """
    prefix = f"{table}." if table else ""
    return ", ".join(f"{prefix}{column}" for column in ("zone", "rack", "leaf_switch", "node_id"))


def free_nodes(gpu_model: GpuModel) -> Tx[list[tuple[str, str, str, str]]]:
    """Every READY, placeable node of a model as (zone, rack, leaf, id), in fabric order:
    placement's candidates, all of them, since the placement policy chooses among them.

    A plain read that locks nothing: on PostgreSQL the chosen nodes are locked afterwards
    (``lock_free``); on SQLite the writer holds the database's single write lock.
    """
    result = yield Sql(
        f"SELECT {fabric_order()} FROM nodes"
        f" WHERE gpu_model = :model AND state = :ready AND {PLACEABLE} ORDER BY {fabric_order()}",
        {"model": gpu_model.value, "ready": NodeState.READY.value},
    )
    return [(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in result.rows]


def lock_free(node_ids: Sequence[str], *, skip_locked: bool, state: NodeState = NodeState.READY) -> Tx[set[str]]:
    """Lock those of ``node_ids`` still in ``state`` (READY: free; ALLOCATED: a node shared by
    part-node allocations) and placeable, in fabric order (PostgreSQL only), and return them:
    a node missing from the answer was taken or changed meanwhile. Nothing for no ids.

    ``skip_locked`` passes over rows other transactions hold, so concurrent placements never
    wait on each other; without it the statement waits for those locks and re-checks the rows
    once their holders finish.
    """
    if not node_ids:
        return set()
    ids, params = expand("id", node_ids)
    result = yield Sql(
        f"SELECT node_id FROM nodes WHERE node_id IN ({ids}) AND state = :state AND {PLACEABLE}"
        f" ORDER BY {fabric_order()}" + for_update(True, skip_locked=skip_locked),
        {**params, "state": state.value},
    )
    return {str(r[0]) for r in result.rows}


def drain_pending(node_ids: Sequence[str]) -> Tx[set[str]]:
    """Which of ``node_ids`` were drained while held, and leave service after their scrub."""
    if not node_ids:
        return set()
    ids, params = expand("id", node_ids)
    result = yield Sql(f"SELECT node_id FROM nodes WHERE node_id IN ({ids}) AND drain_pending = TRUE", params)
    drained = {str(r[0]) for r in result.rows}
    if drained:
        ids, params = expand("id", sorted(drained))
        yield Sql(f"UPDATE nodes SET drain_pending = FALSE WHERE node_id IN ({ids})", params)
    return drained


# Nodes taken from their allocation (by a replacement or a defragmentation move) whose scrub no
# agent performs: SCRUBBING with no live assignment, where a cancelled allocation's nodes keep
# theirs until it is released.
_TAKEN_SCRUBBING = (
    "state = :scrubbing AND agent_managed = FALSE"
    " AND NOT EXISTS (SELECT 1 FROM assignments a WHERE a.node_id = nodes.node_id AND a.released_us IS NULL)"
)


def taken_scrubs_due(*, scrubbed_before_us: int, limit: int, locking: bool) -> Tx[list[str]]:
    """Up to ``limit`` taken nodes no agent scrubs that began their scrub at or before
    ``scrubbed_before_us``, oldest first, locked; on PostgreSQL those another replica holds are
    skipped."""
    result = yield Sql(
        f"SELECT node_id FROM nodes WHERE {_TAKEN_SCRUBBING} AND state_changed_us <= :before"
        " ORDER BY state_changed_us, node_id LIMIT :limit" + for_update(locking, skip_locked=True),
        {"scrubbing": NodeState.SCRUBBING.value, "before": scrubbed_before_us, "limit": limit},
    )
    return [str(r[0]) for r in result.rows]


def oldest_taken_scrub_us() -> Tx[int | None]:
    """When the oldest scrub of a taken node no agent scrubs began, or None if none is scrubbing."""
    result = yield Sql(
        f"SELECT MIN(state_changed_us) FROM nodes WHERE {_TAKEN_SCRUBBING}", {"scrubbing": NodeState.SCRUBBING.value}
    )
    found = result.first()
    return None if found is None or found[0] is None else int(found[0])


def in_service(gpu_model: GpuModel) -> Tx[tuple[int, int]]:
    """How many nodes of a model the fleet has in any state but RETIRED, and the most of them
    under one leaf switch: the most an allocation of the model (one that asks for one fabric
    block) could ever be given as the fleet stands."""
    result = yield Sql(
        "SELECT COUNT(*) FROM nodes WHERE gpu_model = :model AND state <> :retired GROUP BY leaf_switch",
        {"model": gpu_model.value, "retired": NodeState.RETIRED.value},
    )
    per_block = [int(r[0]) for r in result.rows]
    return sum(per_block), max(per_block, default=0)


def count_free(gpu_model: GpuModel) -> Tx[int]:
    """How many nodes of a model are placeable now (for capacity error messages)."""
    result = yield Sql(
        f"SELECT COUNT(*) FROM nodes WHERE gpu_model = :model AND state = :ready AND {PLACEABLE}",
        {"model": gpu_model.value, "ready": NodeState.READY.value},
    )
    found = result.first()
    return 0 if found is None else int(found[0])

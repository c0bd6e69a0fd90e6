"""Persistence of nodes, their GPUs and their state history. The only module that writes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlmodel import col, func, select
from sqlmodel.ext.asyncio.session import AsyncSession
from sqlmodel.sql.expression import Select

from services.errors import Aborted, NotFound
from services.nodes.inventory import GpuModel, Inventory, canonical_gpu_uuid
from services.nodes.transitions import NodeEvent, NodeState, next_state
from services.store.models import AssignmentRow, GpuRow, NodeEventRow, NodeRow
from services.store.tx import Sql, Tx, expand, for_update


@dataclass(frozen=True)
class NodeFilter:
    """ListNodes' filters; None (or "" for the zone) matches everything."""

    state: NodeState | None = None
    gpu_model: GpuModel | None = None
    zone: str = ""


@dataclass(frozen=True)
class NodeView:
    """A node with its GPUs and the allocation holding it, as the API shows it."""

    row: NodeRow
    gpus: tuple[GpuRow, ...]
    allocation_id: str | None


async def get_row(session: AsyncSession, node_id: str, *, for_update: bool = False) -> NodeRow:
    """The node, locked for the transaction when ``for_update``; NOT_FOUND if unknown."""
    query = select(NodeRow).where(NodeRow.node_id == node_id)
    if for_update:
        query = query.with_for_update()
    row = (await session.exec(query)).first()
    if row is None:
        raise NotFound.of("node", node_id, field_path="node_id")
    return row


async def views(session: AsyncSession, rows: Sequence[NodeRow]) -> list[NodeView]:
    """Attach GPUs and live allocations to node rows in two queries."""
    ids = [r.node_id for r in rows]
    if not ids:
        return []
    gpus: dict[str, list[GpuRow]] = {i: [] for i in ids}
    gpu_query = select(GpuRow).where(col(GpuRow.node_id).in_(ids)).order_by(col(GpuRow.gpu_index))
    for gpu in (await session.exec(gpu_query)).all():
        gpus[gpu.node_id].append(gpu)
    held_query = select(AssignmentRow.node_id, AssignmentRow.allocation_id).where(
        col(AssignmentRow.node_id).in_(ids), col(AssignmentRow.released_us).is_(None)
    )
    held = dict((await session.exec(held_query)).all())
    return [NodeView(r, tuple(gpus[r.node_id]), held.get(r.node_id)) for r in rows]


async def get_view(session: AsyncSession, node_id: str) -> NodeView:
    """The node with its GPUs and the allocation holding it; NOT_FOUND if unknown."""
    return (await views(session, [await get_row(session, node_id)]))[0]


async def insert(session: AsyncSession, inventory: Inventory, *, actor: str, now_us: int) -> NodeRow:
    """Add a REGISTERED node, its GPUs and its REGISTER event to ``session`` (flushed); returns the row."""
    row = NodeRow(
        node_id=inventory.node_id,
        gpu_model=inventory.gpu_model,
        zone=inventory.zone,
        rack=inventory.rack,
        leaf_switch=inventory.leaf_switch,
        state=NodeState.REGISTERED,
        created_us=now_us,
        state_changed_us=now_us,
    )
    session.add(row)
    await session.flush()
    session.add_all(GpuRow(gpu_uuid=g.uuid, node_id=inventory.node_id, gpu_index=g.index) for g in inventory.gpus)
    record_event(session, row, NodeEvent.REGISTER, reason="registered", actor=actor, now_us=now_us)
    await session.flush()
    return row


def record_event(
    session: AsyncSession,
    row: NodeRow,
    event: NodeEvent,
    *,
    reason: str,
    actor: str,
    now_us: int,
    before: NodeState | None = None,
) -> None:
    """Add ``event`` to the node's history: from ``before`` (default: its state now, as for the
    events that move no state) to the state ``row`` is in."""
    after = NodeState(row.state)
    session.add(
        NodeEventRow(
            node_id=row.node_id,
            event=event,
            from_state=after if before is None else before,
            to_state=after,
            reason=reason[:256],
            actor=actor,
            at_us=now_us,
        )
    )


def gpu_owners_query(uuids: Sequence[str]) -> Select[str, str]:
    """``gpu_owners``' query: by ``lower(gpu_uuid)``, which index ``ix_gpus_uuid_lower`` serves."""
    return select(GpuRow.gpu_uuid, GpuRow.node_id).where(
        func.lower(GpuRow.gpu_uuid).in_([uuid.lower() for uuid in uuids])
    )


async def gpu_owners(session: AsyncSession, uuids: Sequence[str]) -> dict[str, str]:
    """Which node already owns each of ``uuids`` (canonical, see ``canonical_gpu_uuid``), in
    whatever case it was stored: rows from before UUIDs were made canonical count too."""
    rows = (await session.exec(gpu_owners_query(uuids))).all()
    return {canonical_gpu_uuid(uuid): node_id for uuid, node_id in rows}


async def apply(
    session: AsyncSession, row: NodeRow, event: NodeEvent, *, reason: str, actor: str, now_us: int
) -> NodeRow:
    """Move ``row`` through the transition table and record why. Raises IllegalTransition."""
    before = NodeState(row.state)
    after = next_state(row.node_id, before, event)
    row.state = after
    if after is not before:
        row.state_changed_us = now_us
    session.add(row)
    record_event(session, row, event, reason=reason, actor=actor, now_us=now_us, before=before)
    await session.flush()
    return row


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
        guard = " AND cordoned = FALSE" if uncordoned_only else ""
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


async def list_page(session: AsyncSession, flt: NodeFilter, *, after_id: str | None, limit: int) -> list[NodeRow]:
    """Nodes ordered by id (immutable and unique, so the keyset needs no tiebreaker)."""
    query = select(NodeRow)
    if flt.state is not None:
        query = query.where(NodeRow.state == flt.state)
    if flt.gpu_model is not None:
        query = query.where(NodeRow.gpu_model == flt.gpu_model)
    if flt.zone:
        query = query.where(NodeRow.zone == flt.zone)
    if after_id is not None:
        query = query.where(col(NodeRow.node_id) > after_id)
    query = query.order_by(col(NodeRow.node_id)).limit(limit)
    return list((await session.exec(query)).all())


async def events(session: AsyncSession, node_id: str, *, after_seq: int | None, limit: int) -> list[NodeEventRow]:
    """A node's events oldest first, after ``after_seq`` (the keyset: a unique, immutable id)."""
    await get_row(session, node_id)
    query = select(NodeEventRow).where(NodeEventRow.node_id == node_id)
    if after_seq is not None:
        query = query.where(col(NodeEventRow.event_seq) > after_seq)
    query = query.order_by(col(NodeEventRow.event_seq)).limit(limit)
    return list((await session.exec(query)).all())


def fabric_order(table: str = "") -> str:
    """The ``ORDER BY`` terms of placement order: zone, rack, leaf switch, then id.

    It is also the order every statement that locks several nodes locks them in (PostgreSQL
    locks the rows of ``ORDER BY ... FOR UPDATE`` as it returns them). Two transactions that
    take their nodes' locks in one order cannot deadlock over them; a release that locked its
    nodes in allocation order deadlocked with creates waiting in this one.
    """
    prefix = f"{table}." if table else ""
    return ", ".join(f"{prefix}{column}" for column in ("zone", "rack", "leaf_switch", "node_id"))


def free_nodes(
    gpu_model: GpuModel, *, limit: int, locking: bool, skip_locked: bool
) -> Tx[list[tuple[str, str, str, str]]]:
    """Up to ``limit`` READY, uncordoned nodes of a model as (id, zone, rack, leaf), in
    placement order, locked for the
    transaction on PostgreSQL (``locking``).

    ``skip_locked`` passes over rows other transactions hold, so concurrent placements never
    wait on each other; without it the query waits for those locks and re-checks the rows. On
    SQLite there is nothing to lock: the writer holds the database's single write lock.
    """
    result = yield Sql(
        "SELECT node_id, zone, rack, leaf_switch FROM nodes"
        " WHERE gpu_model = :model AND state = :ready AND cordoned = FALSE"
        f" ORDER BY {fabric_order()} LIMIT :limit" + for_update(locking, skip_locked=skip_locked),
        {"model": gpu_model.value, "ready": NodeState.READY.value, "limit": limit},
    )
    return [(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in result.rows]


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


def count_free(gpu_model: GpuModel) -> Tx[int]:
    """How many nodes of a model are placeable now (for capacity error messages)."""
    result = yield Sql(
        "SELECT COUNT(*) FROM nodes WHERE gpu_model = :model AND state = :ready AND cordoned = FALSE",
        {"model": gpu_model.value, "ready": NodeState.READY.value},
    )
    found = result.first()
    return 0 if found is None else int(found[0])

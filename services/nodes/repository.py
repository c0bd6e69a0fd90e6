"""Persistence of nodes, their GPUs and their state history. The only module that writes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from services.errors import NotFound
from services.nodes.inventory import GpuModel, Inventory
from services.nodes.transitions import NodeEvent, NodeState, next_state
from services.store.models import AssignmentRow, GpuRow, NodeEventRow, NodeRow


@dataclass(frozen=True)
class NodeFilter:
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
    return (await views(session, [await get_row(session, node_id)]))[0]


async def insert(session: AsyncSession, inventory: Inventory, *, now_us: int) -> NodeRow:
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
    session.add(
        NodeEventRow(
            node_id=inventory.node_id,
            event="REGISTER",
            from_state=NodeState.REGISTERED,
            to_state=NodeState.REGISTERED,
            reason="registered",
            actor="",
            at_us=now_us,
        )
    )
    await session.flush()
    return row


async def gpu_owners(session: AsyncSession, uuids: Sequence[str]) -> dict[str, str]:
    """Which node already owns each of ``uuids``."""
    query = select(GpuRow.gpu_uuid, GpuRow.node_id).where(col(GpuRow.gpu_uuid).in_(list(uuids)))
    return dict((await session.exec(query)).all())


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
    session.add(
        NodeEventRow(
            node_id=row.node_id,
            event=event,
            from_state=before,
            to_state=after,
            reason=reason[:256],
            actor=actor,
            at_us=now_us,
        )
    )
    await session.flush()
    return row


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


async def events(session: AsyncSession, node_id: str) -> list[NodeEventRow]:
    await get_row(session, node_id)
    query = select(NodeEventRow).where(NodeEventRow.node_id == node_id).order_by(col(NodeEventRow.event_seq))
    return list((await session.exec(query)).all())


async def free_nodes(session: AsyncSession, gpu_model: GpuModel, *, skip_locked: bool) -> list[NodeRow]:
    """READY, uncordoned nodes of a model, in placement order (zone, rack, leaf, id).

    On PostgreSQL the rows are locked with SKIP LOCKED, so concurrent placements never pick
    the same node; on SQLite the writer already holds the database's single write lock.
    """
    query = (
        select(NodeRow)
        .where(NodeRow.gpu_model == gpu_model, NodeRow.state == NodeState.READY, col(NodeRow.cordoned).is_(False))
        .order_by(col(NodeRow.zone), col(NodeRow.rack), col(NodeRow.leaf_switch), col(NodeRow.node_id))
    )
    if skip_locked:
        query = query.with_for_update(skip_locked=True)
    return list((await session.exec(query)).all())

"""Persistence of allocations, their node assignments and idempotency keys."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, tuple_
from sqlalchemy import select as sa_select
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from services.allocations.states import AllocationState
from services.errors import NotFound
from services.paging import Cursor
from services.store import core
from services.store.models import AllocationRow, AssignmentRow, IdempotencyKeyRow, NodeRow, table_of


@dataclass(frozen=True)
class AllocationView:
    """An allocation with its nodes in placement order."""

    row: AllocationRow
    node_ids: tuple[str, ...]


@dataclass(frozen=True)
class AllocationFilter:
    tenant_id: str | None = None
    state: AllocationState | None = None


async def get_row(
    session: AsyncSession, allocation_id: str, *, tenant_id: str | None, for_update: bool = False
) -> AllocationRow:
    """The allocation if it exists and, when ``tenant_id`` is given, belongs to that tenant.

    Another tenant's allocation is NOT_FOUND, exactly like one that does not exist, so ids
    cannot be probed across tenants.
    """
    query = select(AllocationRow).where(AllocationRow.allocation_id == allocation_id)
    if tenant_id is not None:
        query = query.where(AllocationRow.tenant_id == tenant_id)
    if for_update:
        query = query.with_for_update()
    row = (await session.exec(query)).first()
    if row is None:
        raise NotFound.of("allocation", allocation_id, field_path="allocation_id")
    return row


async def get_rows(session: AsyncSession, allocation_ids: Sequence[str]) -> list[AllocationRow]:
    """The allocations with these ids (any tenant), in no particular order."""
    query = select(AllocationRow).where(col(AllocationRow.allocation_id).in_(list(allocation_ids)))
    return list((await session.exec(query)).all())


async def views(session: AsyncSession, rows: Sequence[AllocationRow]) -> list[AllocationView]:
    ids = [r.allocation_id for r in rows]
    if not ids:
        return []
    nodes: dict[str, list[str]] = {i: [] for i in ids}
    query = (
        select(AssignmentRow.allocation_id, AssignmentRow.node_id)
        .where(col(AssignmentRow.allocation_id).in_(ids))
        .order_by(col(AssignmentRow.allocation_id), col(AssignmentRow.position))
    )
    for allocation_id, node_id in (await session.exec(query)).all():
        nodes[allocation_id].append(node_id)
    return [AllocationView(r, tuple(nodes[r.allocation_id])) for r in rows]


async def get_view(session: AsyncSession, allocation_id: str, *, tenant_id: str | None) -> AllocationView:
    return (await views(session, [await get_row(session, allocation_id, tenant_id=tenant_id)]))[0]


async def list_page(
    session: AsyncSession, flt: AllocationFilter, *, cursor: Cursor | None, limit: int
) -> list[AllocationRow]:
    """Newest first by (created_us, allocation_id): immutable, with a unique tiebreaker."""
    query = select(AllocationRow)
    if flt.tenant_id is not None:
        query = query.where(AllocationRow.tenant_id == flt.tenant_id)
    if flt.state is not None:
        query = query.where(AllocationRow.state == flt.state)
    if cursor is not None:
        query = query.where(
            tuple_(col(AllocationRow.created_us), col(AllocationRow.allocation_id))
            < tuple_(cursor.created_us, cursor.last_id)
        )
    query = query.order_by(col(AllocationRow.created_us).desc(), col(AllocationRow.allocation_id).desc())
    return list((await session.exec(query.limit(limit))).all())


@dataclass(frozen=True)
class HeldNode:
    """A node an allocation still holds, with the node's current state."""

    allocation_id: str
    node_id: str
    node_state: str


async def lock_in_state(
    session: AsyncSession, allocation_ids: Sequence[str], state: AllocationState
) -> list[AllocationRow]:
    """Those of ``allocation_ids`` still in ``state``, locked for the transaction."""
    query = (
        select(AllocationRow)
        .where(col(AllocationRow.allocation_id).in_(list(allocation_ids)), AllocationRow.state == state)
        .order_by(col(AllocationRow.allocation_id))
        .with_for_update()
    )
    return list((await session.exec(query)).all())


async def held_nodes(session: AsyncSession, allocation_ids: Sequence[str]) -> list[HeldNode]:
    """Every node the allocations still hold, with its state, locked for the transaction."""
    query = (
        select(AssignmentRow.allocation_id, NodeRow.node_id, NodeRow.state)
        .join(NodeRow, col(AssignmentRow.node_id) == col(NodeRow.node_id))
        .where(col(AssignmentRow.allocation_id).in_(list(allocation_ids)), col(AssignmentRow.released_us).is_(None))
        .order_by(col(AssignmentRow.allocation_id), col(AssignmentRow.position))
        .with_for_update()
    )
    return [HeldNode(*row) for row in (await session.exec(query)).all()]


async def finish_cancel(session: AsyncSession, allocation_ids: Sequence[str], *, now_us: int) -> None:
    """End the allocations' live assignments and mark them CANCELLED at ``now_us``."""
    ids = list(allocation_ids)
    assignments = table_of(AssignmentRow)
    await core.execute(
        session,
        assignments.update()
        .where(assignments.c.allocation_id.in_(ids), assignments.c.released_us.is_(None))
        .values(released_us=now_us),
    )
    allocations = table_of(AllocationRow)
    await core.execute(
        session,
        allocations.update()
        .where(allocations.c.allocation_id.in_(ids))
        .values(state=AllocationState.CANCELLED.value, released_us=now_us),
    )


async def cancels_due(session: AsyncSession, *, scrubbed_before_us: int, limit: int) -> list[str]:
    """CANCELLING allocations cancelled at or before ``scrubbed_before_us``, oldest first."""
    query = (
        select(AllocationRow.allocation_id)
        .where(AllocationRow.state == AllocationState.CANCELLING, col(AllocationRow.cancel_us) <= scrubbed_before_us)
        .order_by(col(AllocationRow.cancel_us))
        .limit(limit)
    )
    return list((await session.exec(query)).all())


async def oldest_cancel_us(session: AsyncSession) -> int | None:
    """When the oldest still-CANCELLING allocation was cancelled, or None if there is none."""
    query = select(func.min(AllocationRow.cancel_us)).where(AllocationRow.state == AllocationState.CANCELLING)
    oldest: int | None = (await session.exec(query)).one()
    return oldest


async def idempotency_key(
    session: AsyncSession, tenant_id: str, method: str, request_id: str
) -> tuple[str, str] | None:
    """The (fingerprint, result id) recorded for a key, or None."""
    keys = table_of(IdempotencyKeyRow)
    query = sa_select(keys.c.fingerprint, keys.c.result_id).where(
        keys.c.tenant_id == tenant_id, keys.c.method == method, keys.c.request_id == request_id
    )
    row: Sequence[Any] | None = (await core.execute(session, query)).first()
    return None if row is None else (str(row[0]), str(row[1]))

"""Persistence of long-running operations."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import tuple_
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from services.errors import NotFound
from services.paging import Cursor
from services.store import core
from services.store.models import OperationRow, table_of

NAME_PREFIX = "operations/"


def name_of(operation_id: str) -> str:
    return NAME_PREFIX + operation_id


def id_from_name(name: str) -> str | None:
    """The id in ``operations/<id>``, or None when the name has another shape."""
    if not name.startswith(NAME_PREFIX):
        return None
    return name.removeprefix(NAME_PREFIX) or None


async def get_row(session: AsyncSession, operation_id: str, *, tenant_id: str | None) -> OperationRow:
    """The operation, NOT_FOUND when it does not exist or belongs to another tenant."""
    row = await session.get(OperationRow, operation_id)
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        raise NotFound.of("operation", name_of(operation_id), field_path="name")
    return row


async def for_target(session: AsyncSession, kind: str, target_id: str) -> OperationRow | None:
    query = select(OperationRow).where(OperationRow.kind == kind, OperationRow.target_id == target_id)
    return (await session.exec(query)).first()


async def complete(session: AsyncSession, kind: str, target_ids: Sequence[str], *, now_us: int) -> None:
    """Mark the ``kind`` operations of ``target_ids`` done at ``now_us``."""
    operations = table_of(OperationRow)
    await core.execute(
        session,
        operations.update()
        .where(operations.c.kind == kind, operations.c.target_id.in_(list(target_ids)))
        .values(done=True, done_us=now_us),
    )


async def list_page(
    session: AsyncSession, *, tenant_id: str | None, cursor: Cursor | None, limit: int
) -> list[OperationRow]:
    query = select(OperationRow)
    if tenant_id is not None:
        query = query.where(OperationRow.tenant_id == tenant_id)
    if cursor is not None:
        query = query.where(
            tuple_(col(OperationRow.created_us), col(OperationRow.operation_id))
            < tuple_(cursor.created_us, cursor.last_id)
        )
    query = query.order_by(col(OperationRow.created_us).desc(), col(OperationRow.operation_id).desc())
    return list((await session.exec(query.limit(limit))).all())

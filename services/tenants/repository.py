"""Persistence of tenants."""

from __future__ import annotations

from collections.abc import Sequence

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from services.errors import NotFound
from services.store.models import TenantRow
from services.store.tx import Sql, Tx, expand


async def get(session: AsyncSession, tenant_id: str, *, field_path: str = "tenant_id") -> TenantRow:
    """The tenant; NOT_FOUND (naming ``field_path``) if there is none."""
    row = await session.get(TenantRow, tenant_id)
    if row is None:
        raise NotFound.of("tenant", tenant_id, field_path=field_path)
    return row


def require(tenant_id: str, *, field_path: str = "tenant_id") -> Tx[None]:
    """NOT_FOUND unless the tenant exists; one query, for hot paths that need no row."""
    result = yield Sql("SELECT 1 FROM tenants WHERE tenant_id = :tenant", {"tenant": tenant_id})
    if result.first() is None:
        raise NotFound.of("tenant", tenant_id, field_path=field_path)


def existing(tenant_ids: Sequence[str]) -> Tx[set[str]]:
    """Which of ``tenant_ids`` exist: one query for many."""
    if not tenant_ids:
        return set()
    ids, params = expand("id", tenant_ids)
    result = yield Sql(f"SELECT tenant_id FROM tenants WHERE tenant_id IN ({ids})", params)
    return {str(r[0]) for r in result.rows}


async def list_page(session: AsyncSession, *, after_id: str | None, limit: int) -> list[TenantRow]:
    """Up to ``limit`` tenants in id order, after ``after_id``."""
    query = select(TenantRow)
    if after_id is not None:
        query = query.where(col(TenantRow.tenant_id) > after_id)
    return list((await session.exec(query.order_by(col(TenantRow.tenant_id)).limit(limit))).all())

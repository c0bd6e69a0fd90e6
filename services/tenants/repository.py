"""Persistence of tenants."""

from __future__ import annotations

from sqlalchemy import select as sa_select
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from services.errors import NotFound
from services.store import core
from services.store.models import TenantRow, table_of


async def get(session: AsyncSession, tenant_id: str, *, field_path: str = "tenant_id") -> TenantRow:
    row = await session.get(TenantRow, tenant_id)
    if row is None:
        raise NotFound.of("tenant", tenant_id, field_path=field_path)
    return row


async def require(session: AsyncSession, tenant_id: str, *, field_path: str = "tenant_id") -> None:
    """NOT_FOUND unless the tenant exists; one Core query, for hot paths that need no row."""
    tenants = table_of(TenantRow)
    query = sa_select(tenants.c.tenant_id).where(tenants.c.tenant_id == tenant_id)
    found = (await core.execute(session, query)).first()
    if found is None:
        raise NotFound.of("tenant", tenant_id, field_path=field_path)


async def list_page(session: AsyncSession, *, after_id: str | None, limit: int) -> list[TenantRow]:
    query = select(TenantRow)
    if after_id is not None:
        query = query.where(col(TenantRow.tenant_id) > after_id)
    return list((await session.exec(query.order_by(col(TenantRow.tenant_id)).limit(limit))).all())

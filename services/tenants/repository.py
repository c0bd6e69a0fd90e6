"""Persistence of tenants, as transaction steps (store/tx.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.errors import NotFound
from services.store.tx import Sql, Tx, expand


@dataclass(frozen=True, slots=True)
class Tenant:
    """One row of the ``tenants`` table (store/models.py defines the table)."""

    tenant_id: str
    display_name: str
    created_us: int


_COLUMNS = "tenant_id, display_name, created_us"


def _tenant(values: Sequence[Any]) -> Tenant:
    return Tenant(str(values[0]), str(values[1]), int(values[2]))


def get(tenant_id: str, *, field_path: str = "tenant_id") -> Tx[Tenant]:
    """The tenant; NOT_FOUND (naming ``field_path``) if there is none."""
    found = (yield Sql(f"SELECT {_COLUMNS} FROM tenants WHERE tenant_id = :tenant", {"tenant": tenant_id})).first()
    if found is None:
        raise NotFound.of("tenant", tenant_id, field_path=field_path)
    return _tenant(found)


def exists(tenant_id: str) -> Tx[bool]:
    """Whether the tenant exists; one query, for hot paths that need no row."""
    result = yield Sql("SELECT 1 FROM tenants WHERE tenant_id = :tenant", {"tenant": tenant_id})
    return result.first() is not None


def require(tenant_id: str, *, field_path: str = "tenant_id") -> Tx[None]:
    """NOT_FOUND (naming ``field_path``) unless the tenant exists."""
    if not (yield from exists(tenant_id)):
        raise NotFound.of("tenant", tenant_id, field_path=field_path)


def existing(tenant_ids: Sequence[str]) -> Tx[set[str]]:
    """Which of ``tenant_ids`` exist: one query for many."""
    if not tenant_ids:
        return set()
    ids, params = expand("id", tenant_ids)
    result = yield Sql(f"SELECT tenant_id FROM tenants WHERE tenant_id IN ({ids})", params)
    return {str(r[0]) for r in result.rows}


def insert(row: Tenant) -> Tx[None]:
    """Add a tenant; one whose id is taken is ``tx.Refused``."""
    yield Sql(
        f"INSERT INTO tenants ({_COLUMNS}) VALUES (:tenant_id, :display_name, :created_us)",
        {"tenant_id": row.tenant_id, "display_name": row.display_name, "created_us": row.created_us},
    )


def list_page(*, after_id: str | None, limit: int) -> Tx[list[Tenant]]:
    """Up to ``limit`` tenants in id order, after ``after_id``."""
    sql = f"SELECT {_COLUMNS} FROM tenants"
    params: dict[str, Any] = {"limit": limit}
    if after_id is not None:
        sql += " WHERE tenant_id > :after"
        params["after"] = after_id
    result = yield Sql(sql + " ORDER BY tenant_id LIMIT :limit", params)
    return [_tenant(r) for r in result.rows]

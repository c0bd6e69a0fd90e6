"""Creating tenants and their credentials."""

from __future__ import annotations

from functools import partial

from services.auth import repository as tokens_repo
from services.auth import tokens
from services.auth.principal import Principal, Role
from services.auth.tokens import IssuedToken
from services.clock import now_us
from services.errors import AlreadyExists, NotFound
from services.fabric import partitions
from services.store.engine import Database
from services.store.tx import Refused, Tx
from services.tenants import repository as repo
from services.tenants.repository import Tenant


async def create(store: Database, tenant_id: str, display_name: str) -> tuple[Tenant, IssuedToken]:
    """Create a tenant with its first token; ALREADY_EXISTS if the id is taken."""
    row = Tenant(tenant_id=tenant_id, display_name=display_name or tenant_id, created_us=now_us())
    issued = tokens.issue()
    try:
        await store.transact(partial(_create, row, issued))
    except Refused:
        # A concurrent create of the same id committed first.
        raise _exists(tenant_id) from None
    return row, issued


def _create(row: Tenant, issued: IssuedToken) -> Tx[None]:
    if (yield from repo.exists(row.tenant_id)):
        raise _exists(row.tenant_id)
    yield from repo.insert(row)
    yield from partitions.assign(row.tenant_id)
    yield from tokens_repo.insert_token(issued, Role.TENANT, tenant_id=row.tenant_id, now_us=row.created_us)


async def create_token(store: Database, tenant_id: str) -> IssuedToken:
    """Issue another token for the tenant (its plaintext shown once); NOT_FOUND if there is no such tenant."""
    issued = tokens.issue()
    await store.transact(partial(_create_token, tenant_id, issued))
    return issued


def _create_token(tenant_id: str, issued: IssuedToken) -> Tx[None]:
    yield from repo.require(tenant_id)
    yield from tokens_repo.insert_token(issued, Role.TENANT, tenant_id=tenant_id, now_us=now_us())


async def get_visible(store: Database, principal: Principal, tenant_id: str) -> Tenant:
    """A tenant may read only itself; any other id reads as NOT_FOUND."""
    if principal.role is Role.TENANT and principal.tenant_id != tenant_id:
        raise NotFound.of("tenant", tenant_id, field_path="tenant_id")
    return await store.query(repo.get(tenant_id))


def _exists(tenant_id: str) -> AlreadyExists:
    return AlreadyExists(
        reason="TENANT_EXISTS",
        message=f"tenant {tenant_id!r} already exists",
        metadata={"tenant_id": tenant_id, "field": "tenant_id"},
    )

"""Creating tenants and their credentials."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError

from services.auth import repository as tokens_repo
from services.auth.principal import Principal, Role
from services.auth.tokens import IssuedToken
from services.clock import now_us
from services.errors import AlreadyExists, NotFound
from services.store.engine import Database
from services.store.models import TenantRow
from services.tenants import repository as repo


async def create(store: Database, tenant_id: str, display_name: str) -> tuple[TenantRow, IssuedToken]:
    """Create a tenant with its first token; ALREADY_EXISTS if the id is taken."""
    try:
        async with store.write() as session:
            if await session.get(TenantRow, tenant_id) is not None:
                raise _exists(tenant_id)
            row = TenantRow(tenant_id=tenant_id, display_name=display_name or tenant_id, created_us=now_us())
            session.add(row)
            await session.flush()
            token = await tokens_repo.issue_token(session, Role.TENANT, tenant_id=tenant_id)
            return row, token
    except IntegrityError:
        raise _exists(tenant_id) from None


async def create_token(store: Database, tenant_id: str) -> IssuedToken:
    """Issue another token for the tenant (its plaintext shown once); NOT_FOUND if there is no such tenant."""
    async with store.write() as session:
        await repo.get(session, tenant_id)
        return await tokens_repo.issue_token(session, Role.TENANT, tenant_id=tenant_id)


async def get_visible(store: Database, principal: Principal, tenant_id: str) -> TenantRow:
    """A tenant may read only itself; any other id reads as NOT_FOUND."""
    if principal.role is Role.TENANT and principal.tenant_id != tenant_id:
        raise NotFound.of("tenant", tenant_id, field_path="tenant_id")
    async with store.read() as session:
        return await repo.get(session, tenant_id)


def _exists(tenant_id: str) -> AlreadyExists:
    return AlreadyExists(
        reason="TENANT_EXISTS",
        message=f"tenant {tenant_id!r} already exists",
        metadata={"tenant_id": tenant_id, "field": "tenant_id"},
    )

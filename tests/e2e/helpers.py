"""Helpers shared by the end-to-end tests."""

from __future__ import annotations

from clients import Allocation, AsyncClient
from tests.conftest import RunningControlPlane


async def new_tenant(operator: AsyncClient, plane: RunningControlPlane, tenant_id: str) -> AsyncClient:
    """Create a tenant and return a client that speaks with its token."""
    created = await operator.create_tenant(tenant_id)
    return plane.client(created.token)


async def list_all(client: AsyncClient, *, tenant_id: str = "", page_size: int = 0) -> list[Allocation]:
    """Every allocation the caller sees, page by page; fails instead of looping if paging never ends."""
    items: list[Allocation] = []
    token = ""
    for _ in range(100):
        page = await client.list_allocations(tenant_id=tenant_id, page_size=page_size, page_token=token)
        items.extend(page)
        token = page.next_page_token
        if not token:
            return items
    raise AssertionError("paging did not end after 100 pages")

"""TenantService: protobuf in, domain calls, protobuf out. No rules live here."""

from __future__ import annotations

from typing import Any

import grpc

from gpucloud.v1 import tenant_pb2, tenant_pb2_grpc
from services.auth.principal import current_principal
from services.paging import Cursor, PageTokens, cut_page
from services.store.engine import Database
from services.tenants import commands
from services.tenants import repository as repo
from services.tenants.proto import tenant_to_proto
from services.validation import Violations, checked_id

Context = grpc.aio.ServicerContext[Any, Any]


class TenantServicer(tenant_pb2_grpc.TenantServiceServicer):
    """TenantService: checks each request, then calls ``commands`` or reads the repository."""

    def __init__(self, store: Database, page_tokens: PageTokens) -> None:
        self._store = store
        self._tokens = page_tokens

    async def CreateTenant(
        self, request: tenant_pb2.CreateTenantRequest, context: Context
    ) -> tenant_pb2.CreateTenantResponse:
        """Create a tenant and its first token (in this response only); ALREADY_EXISTS if the id is taken."""
        v = Violations()
        v.identifier("tenant_id", request.tenant_id)
        v.text("display_name", request.display_name)
        v.raise_if_any()
        row, token = await commands.create(self._store, request.tenant_id, request.display_name)
        return tenant_pb2.CreateTenantResponse(
            tenant=tenant_to_proto(row), token=token.plaintext, token_id=token.token_id
        )

    async def GetTenant(self, request: tenant_pb2.GetTenantRequest, context: Context) -> tenant_pb2.GetTenantResponse:
        """Read a tenant; a tenant may read only itself (any other id is NOT_FOUND)."""
        tenant_id = checked_id("tenant_id", request.tenant_id)
        row = await commands.get_visible(self._store, current_principal(), tenant_id)
        return tenant_pb2.GetTenantResponse(tenant=tenant_to_proto(row))

    async def ListTenants(
        self, request: tenant_pb2.ListTenantsRequest, context: Context
    ) -> tenant_pb2.ListTenantsResponse:
        """List tenants in id order."""
        v = Violations()
        size = v.page_size("page_size", request.page_size)
        scope: dict[str, str | int] = {"list": "tenants"}
        cursor = v.page_token(self._tokens, request.page_token, scope)
        v.raise_if_any()
        rows = await self._store.query(repo.list_page(after_id=cursor.last_id if cursor else None, limit=size + 1))
        rows, after = cut_page(rows, size, lambda row: Cursor(0, row.tenant_id))
        return tenant_pb2.ListTenantsResponse(
            tenants=[tenant_to_proto(r) for r in rows], next_page_token=self._tokens.next_token(after, scope)
        )

    async def CreateTenantToken(
        self, request: tenant_pb2.CreateTenantTokenRequest, context: Context
    ) -> tenant_pb2.CreateTenantTokenResponse:
        """Issue another token for a tenant; its earlier tokens stay valid until revoked."""
        token = await commands.create_token(self._store, checked_id("tenant_id", request.tenant_id))
        return tenant_pb2.CreateTenantTokenResponse(token=token.plaintext, token_id=token.token_id)

"""TokenService: protobuf in, domain calls, protobuf out. No rules live here."""

from __future__ import annotations

from typing import Any

import grpc

from gpucloud.v1 import token_pb2, token_pb2_grpc
from services.auth.authenticator import Authenticator
from services.auth.repository import TokenFilter
from services.auth.tokens import split as split_token
from services.paging import Cursor, PageTokens, cut_page
from services.store.engine import Database
from services.tokens import commands
from services.tokens.proto import ROLE_FROM_PROTO, token_to_proto
from services.validation import Violations, checked_id

Context = grpc.aio.ServicerContext[Any, Any]

_KNOWN_ROLES = frozenset(ROLE_FROM_PROTO)


class TokenServicer(token_pb2_grpc.TokenServiceServicer):
    """TokenService: checks each request, then calls ``commands``."""

    def __init__(self, store: Database, page_tokens: PageTokens, authenticator: Authenticator) -> None:
        self._store = store
        self._tokens = page_tokens
        # The server's own credential cache: a revoke evicts the token from it at once.
        self._authenticator = authenticator

    async def CreateAgentToken(
        self, request: token_pb2.CreateAgentTokenRequest, context: Context
    ) -> token_pb2.CreateAgentTokenResponse:
        """Mint an agent token for a node (in this response only); the node need not be registered yet."""
        issued = await commands.create_agent_token(self._store, checked_id("node_id", request.node_id))
        return token_pb2.CreateAgentTokenResponse(token=issued.plaintext, token_id=issued.token_id)

    async def CreateOperatorToken(
        self, request: token_pb2.CreateOperatorTokenRequest, context: Context
    ) -> token_pb2.CreateOperatorTokenResponse:
        """Mint another operator token (in this response only), for rotating the one in use."""
        issued = await commands.create_operator_token(self._store)
        return token_pb2.CreateOperatorTokenResponse(token=issued.plaintext, token_id=issued.token_id)

    async def ListTokens(self, request: token_pb2.ListTokensRequest, context: Context) -> token_pb2.ListTokensResponse:
        """List tokens newest first, filtered by tenant, node and role."""
        v = Violations()
        size = v.page_size("page_size", request.page_size)
        v.identifier("tenant_id", request.tenant_id, required=False)
        v.identifier("node_id", request.node_id, required=False)
        v.enum("role", request.role, _KNOWN_ROLES, required=False)
        scope: dict[str, str | int] = {
            "list": "tokens",
            "tenant_id": request.tenant_id,
            "node_id": request.node_id,
            "role": request.role,
        }
        cursor = v.page_token(self._tokens, request.page_token, scope)
        v.raise_if_any()
        flt = TokenFilter(
            tenant_id=request.tenant_id or None,
            node_id=request.node_id or None,
            role=ROLE_FROM_PROTO.get(request.role),
        )
        rows = await commands.list_page(self._store, flt, cursor=cursor, limit=size + 1)
        rows, after = cut_page(rows, size, lambda row: Cursor(row.created_us, row.token_id))
        return token_pb2.ListTokensResponse(
            tokens=[token_to_proto(r) for r in rows], next_page_token=self._tokens.next_token(after, scope)
        )

    async def RevokeToken(
        self, request: token_pb2.RevokeTokenRequest, context: Context
    ) -> token_pb2.RevokeTokenResponse:
        """Revoke a token (idempotent); the last operator token that is not revoked is FAILED_PRECONDITION."""
        v = Violations()
        whole = split_token(request.token_id)
        if whole is not None:
            # A pasted token, secret and all: the error must not echo the secret back into
            # terminals and logs, only the id to pass instead.
            v.add("token_id", f"is a whole token, secret included; pass only its id, {whole[0]!r}")
        else:
            v.identifier("token_id", request.token_id)
        v.raise_if_any()
        revoked = await commands.revoke(self._store, self._authenticator, request.token_id)
        return token_pb2.RevokeTokenResponse(token=token_to_proto(revoked))

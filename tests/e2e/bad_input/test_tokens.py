"""Bad input on every TokenService RPC: the right code, the bad field named, and nothing changed.

The world of tests/e2e/bad_input/test_every_rpc.py (a tenant with its token, nodes, allocations,
the operator token), seen through raw stubs with TokenService added; each refused call must leave
every table, and the token listing, as it was.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import grpc
import pytest

from gpucloud.v1 import token_pb2, token_pb2_grpc
from tests.e2e.bad_input.test_every_rpc import TENANT, Case, World, check_cases, invalid, not_found

# The fixture this module builds on, re-exported so that pytest finds it here.
from tests.e2e.bad_input.test_every_rpc import world as world

T = "token"
ROLE_AGENT = token_pb2.TOKEN_ROLE_AGENT


@dataclasses.dataclass
class TokenWorld(World):
    """The bad-input world, whose stubs and snapshot include TokenService."""

    @property
    def stubs(self) -> dict[str, Any]:
        return {**super().stubs, T: token_pb2_grpc.TokenServiceStub(self.channel)}

    async def snapshot(self) -> tuple[object, ...]:
        listed = await self.client.list_tokens(page_size=1000)
        return (*await super().snapshot(), listed)


@pytest.fixture
async def tokens_world(world: World) -> TokenWorld:
    made = TokenWorld(**{f.name: getattr(world, f.name) for f in dataclasses.fields(world)})
    made.baseline = await made.snapshot()
    return made


def list_tokens(**fields: Any) -> token_pb2.ListTokensRequest:
    return token_pb2.ListTokensRequest(**fields)


async def test_create_agent_token_bad_input(tokens_world: TokenWorld) -> None:
    """An empty, malformed or oversized node id is INVALID_ARGUMENT naming node_id; no token is minted."""
    create = token_pb2.CreateAgentTokenRequest
    await check_cases(
        tokens_world,
        [
            invalid("create: empty node", T, "CreateAgentToken", create(), "node_id"),
            invalid("create: upper case", T, "CreateAgentToken", create(node_id="Node-1"), "node_id"),
            invalid("create: spaces", T, "CreateAgentToken", create(node_id="node 1"), "node_id"),
            invalid("create: leading -", T, "CreateAgentToken", create(node_id="-node"), "node_id"),
            invalid("create: 64 chars", T, "CreateAgentToken", create(node_id="n" * 64), "node_id"),
            invalid("create: 100k chars", T, "CreateAgentToken", create(node_id="n" * 100_000), "node_id"),
        ],
    )


async def test_list_tokens_bad_input(tokens_world: TokenWorld) -> None:
    """Bad sizes, filters and page tokens name their field; an unknown tenant is NOT_FOUND."""
    page = await tokens_world.client.list_tokens(page_size=1)
    assert page.next_page_token
    real = page.next_page_token
    tampered = real[:20] + ("A" if real[20] != "A" else "B") + real[21:]
    await check_cases(
        tokens_world,
        [
            invalid("list: negative size", T, "ListTokens", list_tokens(page_size=-1), "page_size"),
            invalid("list: min int32 size", T, "ListTokens", list_tokens(page_size=-(2**31)), "page_size"),
            invalid("list: unknown role", T, "ListTokens", list_tokens(role=99), "role"),
            invalid("list: negative role", T, "ListTokens", list_tokens(role=-1), "role"),
            invalid("list: bad tenant", T, "ListTokens", list_tokens(tenant_id="ACME"), "tenant_id"),
            invalid("list: oversized tenant", T, "ListTokens", list_tokens(tenant_id="a" * 5000), "tenant_id"),
            invalid("list: bad node", T, "ListTokens", list_tokens(node_id="node_1"), "node_id"),
            invalid("list: oversized node", T, "ListTokens", list_tokens(node_id="n" * 64), "node_id"),
            invalid(
                "list: garbage token",
                T,
                "ListTokens",
                list_tokens(page_token="not-a-token"),
                "page_token",
                reason="INVALID_PAGE_TOKEN",
            ),
            invalid(
                "list: tampered token",
                T,
                "ListTokens",
                list_tokens(page_token=tampered),
                "page_token",
                reason="INVALID_PAGE_TOKEN",
            ),
            invalid(
                "list: token of other filters",
                T,
                "ListTokens",
                list_tokens(page_token=real, role=ROLE_AGENT),
                "page_token",
                reason="INVALID_PAGE_TOKEN",
            ),
            invalid(
                "list: token of the node listing",
                T,
                "ListTokens",
                list_tokens(page_token=tokens_world.nodes_page_token),
                "page_token",
                reason="INVALID_PAGE_TOKEN",
            ),
            invalid(
                "list: everything bad",
                T,
                "ListTokens",
                list_tokens(page_size=-5, role=7, tenant_id="-", node_id="N", page_token="x"),
                "page_size",
                "role",
                "tenant_id",
                "node_id",
                "page_token",
            ),
            not_found("list: unknown tenant", T, "ListTokens", list_tokens(tenant_id="ghost"), "tenant_id"),
        ],
    )


async def test_revoke_token_bad_input(tokens_world: TokenWorld) -> None:
    """Bad ids name token_id, an unknown one is NOT_FOUND TOKEN_NOT_FOUND, and the last operator
    token is FAILED_PRECONDITION LAST_OPERATOR_TOKEN: none of them revokes anything."""
    revoke = token_pb2.RevokeTokenRequest
    (operator_token,) = (await tokens_world.client.list_tokens(role="OPERATOR")).items
    (tenant_token,) = (await tokens_world.client.list_tokens(tenant_id=TENANT)).items
    await check_cases(
        tokens_world,
        [
            invalid("revoke: empty", T, "RevokeToken", revoke(), "token_id"),
            invalid("revoke: upper case", T, "RevokeToken", revoke(token_id=tenant_token.token_id.upper()), "token_id"),
            invalid(
                "revoke: whole token", T, "RevokeToken", revoke(token_id=f"gpc_{tenant_token.token_id}_x"), "token_id"
            ),
            invalid("revoke: 64 chars", T, "RevokeToken", revoke(token_id="a" * 64), "token_id"),
            invalid("revoke: 100k chars", T, "RevokeToken", revoke(token_id="a" * 100_000), "token_id"),
            Case(
                "revoke: unknown",
                T,
                "RevokeToken",
                revoke(token_id="0123456789abcdef"),
                grpc.StatusCode.NOT_FOUND,
                frozenset({"token_id"}),
                reason="TOKEN_NOT_FOUND",
            ),
            Case(
                "revoke: the last operator token",
                T,
                "RevokeToken",
                revoke(token_id=operator_token.token_id),
                grpc.StatusCode.FAILED_PRECONDITION,
                reason="LAST_OPERATOR_TOKEN",
            ),
        ],
    )

"""TokenService end to end: agent and operator tokens minted over the API, revocation that takes
effect at once on the serving replica, the last operator token kept, and listings without secrets."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Awaitable, Callable
from typing import TypedDict, Unpack

import grpc
import pytest

from clients import (
    ApiToken,
    AsyncClient,
    Client,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from gpucloud.v1 import token_pb2, token_pb2_grpc
from services.auth import tokens as token_format
from tests.conftest import RunningControlPlane, gpu_uuids


async def register(client: AsyncClient, node_id: str) -> str:
    node = await client.register_node(
        node_id, gpu_model="H100", gpu_uuids=gpu_uuids(node_id), zone="zone-a", rack="rack-0", leaf_switch="leaf-0"
    )
    return node.state


async def operator_token_id(operator: AsyncClient) -> str:
    (only,) = (await operator.list_tokens(role="OPERATOR")).items
    return only.token_id


def token_id_of(plaintext: str) -> str:
    parts = token_format.split(plaintext)
    assert parts is not None
    return parts[0]


class TokenFilters(TypedDict, total=False):
    """The filters of iter_tokens that the tests list by."""

    tenant_id: str
    node_id: str
    role: str


async def every_token(operator: AsyncClient, **filters: Unpack[TokenFilters]) -> list[ApiToken]:
    return [t async for t in operator.iter_tokens(**filters)]


# Agent tokens ----------------------------------------------------------------------------------


async def test_an_agent_token_from_the_api_registers_and_burns_in_its_own_node_only(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """CreateAgentToken for a node not registered yet: the agent registers it and passes its
    burn-in; for any other node it is PERMISSION_DENIED AGENT_NODE_MISMATCH."""
    created = await operator.create_agent_token("node-a")
    assert token_id_of(created.token) == created.token_id
    await register(operator, "node-b")
    async with control_plane.client(created.token) as agent:
        assert await register(agent, "node-a") == "BURN_IN"
        assert (await agent.complete_burn_in("node-a")).state == "READY"
        assert (await agent.get_node("node-a")).state == "READY"
        attempts: list[Callable[[], Awaitable[object]]] = [
            lambda: register(agent, "node-b"),
            lambda: register(agent, "node-c"),
            lambda: agent.get_node("node-b"),
            lambda: agent.complete_burn_in("node-b"),
        ]
        for attempt in attempts:
            with pytest.raises(PermissionDeniedError) as denied:
                await attempt()
            assert denied.value.reason == "AGENT_NODE_MISMATCH"
    assert (await operator.get_node("node-b")).state == "BURN_IN"
    with pytest.raises(NotFoundError):
        await operator.get_node("node-c")  # refused, so never registered
    assert {e.actor for e in await operator.list_node_events("node-a")} == {"agent:node-a"}
    (listed,) = (await operator.list_tokens(node_id="node-a")).items
    assert (listed.token_id, listed.role, listed.node_id, listed.tenant_id) == (
        created.token_id,
        "AGENT",
        "node-a",
        None,
    )
    assert listed.revoke_time is None


async def test_a_node_may_have_several_agent_tokens_and_a_revoked_one_registers_nothing(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    first = await operator.create_agent_token("node-a")
    second = await operator.create_agent_token("node-a")
    assert first.token_id != second.token_id
    async with control_plane.client(first.token) as old, control_plane.client(second.token) as new:
        assert await register(old, "node-a") == "BURN_IN"  # cached on this server now
        await operator.revoke_token(first.token_id)
        with pytest.raises(UnauthenticatedError) as refused:
            await register(old, "node-a")
        assert refused.value.reason == "INVALID_TOKEN"
        assert await register(new, "node-a") == "BURN_IN"  # a repeat: the same inventory


# Revocation ------------------------------------------------------------------------------------


async def test_a_revoked_tenant_token_is_refused_on_the_next_call_to_the_same_server(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """The token was just used (so it sits in the server's 5 s credential cache): revoked, the
    very next call with it is UNAUTHENTICATED; the tenant's other token keeps working."""
    created = await operator.create_tenant("acme")
    rotated = await operator.create_tenant_token("acme")
    assert rotated.token_id == token_id_of(rotated.token) != created.token_id
    async with control_plane.client(created.token) as tenant, control_plane.client(rotated.token) as other:
        assert (await tenant.get_tenant("acme")).tenant_id == "acme"
        revoked = await operator.revoke_token(created.token_id)
        assert revoked.revoke_time is not None
        assert (revoked.role, revoked.tenant_id) == ("TENANT", "acme")
        with pytest.raises(UnauthenticatedError) as refused:
            await tenant.get_tenant("acme")
        assert refused.value.reason == "INVALID_TOKEN"
        assert (await other.get_tenant("acme")).tenant_id == "acme"
    listed = {t.token_id: t for t in await every_token(operator, tenant_id="acme")}
    assert set(listed) == {created.token_id, rotated.token_id}
    assert listed[created.token_id] == revoked
    assert listed[rotated.token_id].revoke_time is None


async def test_revoking_twice_is_safe_and_keeps_the_first_revoke_time(operator: AsyncClient) -> None:
    created = await operator.create_tenant("acme")
    first = await operator.revoke_token(created.token_id)
    # A round trip later: the server's microsecond clock has moved on, so a second stamp would show.
    again = await operator.revoke_token(created.token_id)
    assert again == first
    (listed,) = (await operator.list_tokens(tenant_id="acme")).items
    assert listed == first


async def test_the_last_operator_token_cannot_be_revoked(operator: AsyncClient) -> None:
    """FAILED_PRECONDITION LAST_OPERATOR_TOKEN, and the token still works."""
    token_id = await operator_token_id(operator)
    with pytest.raises(FailedPreconditionError) as refused:
        await operator.revoke_token(token_id)
    assert refused.value.reason == "LAST_OPERATOR_TOKEN"
    assert refused.value.metadata["token_id"] == token_id
    (still,) = (await operator.list_tokens(role="OPERATOR")).items
    assert still.revoke_time is None


async def test_an_operator_token_may_be_revoked_while_another_remains(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """With two operator tokens one may go, even by its own hand; then the other is the last."""
    own = await operator_token_id(operator)
    spare = (await operator.create_operator_token()).token
    async with control_plane.client(spare) as second:
        assert (await second.revoke_token(token_id_of(spare))).revoke_time is not None
        with pytest.raises(UnauthenticatedError):
            await second.list_tokens()
    with pytest.raises(FailedPreconditionError) as refused:
        await operator.revoke_token(own)
    assert refused.value.reason == "LAST_OPERATOR_TOKEN"


async def test_an_operator_token_is_rotated_over_the_api(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """CreateOperatorToken, then the old token revoked with the new one: the old is refused
    at once, the new one runs the fleet and is now the last (not revocable)."""
    old = await operator_token_id(operator)
    created = await operator.create_operator_token()
    assert token_id_of(created.token) == created.token_id != old
    async with control_plane.client(created.token) as rotated:
        assert (await rotated.revoke_token(old)).revoke_time is not None
        with pytest.raises(UnauthenticatedError):
            await operator.list_tokens()
        tokens = {t.token_id: t for t in await every_token(rotated, role="OPERATOR")}
        assert set(tokens) == {old, created.token_id}
        assert tokens[created.token_id].revoke_time is None
        with pytest.raises(FailedPreconditionError) as refused:
            await rotated.revoke_token(created.token_id)
        assert refused.value.reason == "LAST_OPERATOR_TOKEN"
        await rotated.create_tenant("acme")  # an operator method, with the new token


async def test_two_operators_revoking_each_other_at_once_leave_one_operator_token(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Each revokes the other's token concurrently: exactly one revoke wins; the other is refused
    (LAST_OPERATOR_TOKEN, or UNAUTHENTICATED when its token was revoked before it was read)."""
    for _ in range(3):
        spare = (await operator.create_operator_token()).token
        live = [t for t in await every_token(operator, role="OPERATOR") if t.revoke_time is None]
        (own,) = [t.token_id for t in live if t.token_id != token_id_of(spare)]
        async with control_plane.client(spare) as second:
            outcomes = await asyncio.gather(
                operator.revoke_token(token_id_of(spare)), second.revoke_token(own), return_exceptions=True
            )
        won = [o for o in outcomes if isinstance(o, ApiToken)]
        lost = [o for o in outcomes if not isinstance(o, ApiToken)]
        assert len(won) == 1, outcomes
        assert len(lost) == 1, outcomes
        assert isinstance(lost[0], FailedPreconditionError | UnauthenticatedError), lost
        if won[0].token_id == own:
            return  # the fixture's operator token is gone: nothing more can be asked with it
        remaining = [t for t in await every_token(operator, role="OPERATOR") if t.revoke_time is None]
        assert [t.token_id for t in remaining] == [own]


async def test_an_unknown_token_id_is_not_found_naming_it(operator: AsyncClient) -> None:
    with pytest.raises(NotFoundError) as missing:
        await operator.revoke_token("0123456789abcdef")
    assert (missing.value.reason, missing.value.metadata["field"]) == ("TOKEN_NOT_FOUND", "token_id")
    assert missing.value.metadata["token_id"] == "0123456789abcdef"


# Listing ---------------------------------------------------------------------------------------


async def test_list_tokens_pages_every_token_once_newest_first_while_others_are_made(
    operator: AsyncClient,
) -> None:
    for tenant_id in ("tenant-a", "tenant-b"):
        await operator.create_tenant(tenant_id)
    await operator.create_tenant_token("tenant-a")
    for node_id in ("node-x", "node-y", "node-z"):
        await operator.create_agent_token(node_id)
    before = await every_token(operator)
    assert len(before) == 7
    seen: list[str] = []
    token = ""
    for _ in range(20):
        page = await operator.list_tokens(page_size=2, page_token=token)
        assert len(page) <= 2
        seen.extend(t.token_id for t in page)
        # Tokens made while paging land before the cursor (newest first): never seen, never repeated.
        await operator.create_agent_token(f"node-new-{len(seen)}")
        token = page.next_page_token
        if not token:
            break
    assert seen == [t.token_id for t in before]
    times = [t.create_time for t in before]
    assert all(a is not None and b is not None and a >= b for a, b in itertools.pairwise(times))


async def test_list_tokens_filters_by_tenant_node_and_role(operator: AsyncClient) -> None:
    a = await operator.create_tenant("tenant-a")
    await operator.create_tenant("tenant-b")
    agent_x = await operator.create_agent_token("node-x")
    await operator.create_agent_token("node-y")
    await operator.revoke_token(a.token_id)  # revoked tokens are listed too

    def ids(tokens: list[ApiToken]) -> set[str]:
        return {t.token_id for t in tokens}

    assert ids(await every_token(operator, tenant_id="tenant-a")) == {a.token_id}
    assert ids(await every_token(operator, node_id="node-x")) == {agent_x.token_id}
    assert {t.node_id for t in await every_token(operator, role="AGENT")} == {"node-x", "node-y"}
    assert {t.tenant_id for t in await every_token(operator, role="tenant")} == {"tenant-a", "tenant-b"}
    assert len(await every_token(operator, role="OPERATOR")) == 1
    assert await every_token(operator, tenant_id="tenant-a", role="AGENT") == []
    assert await every_token(operator, node_id="node-never-seen") == []
    with pytest.raises(NotFoundError) as missing:
        await operator.list_tokens(tenant_id="ghost")
    assert (missing.value.reason, missing.value.metadata["field"]) == ("TENANT_NOT_FOUND", "tenant_id")


async def test_no_token_message_carries_a_secret_or_its_digest(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """ApiToken has no field for one, and neither the listing's nor a revoke's bytes contain any."""
    plaintexts = [(await operator.create_tenant("acme")).token, (await operator.create_agent_token("node-a")).token]
    plaintexts.append(control_plane.operator_token)
    assert {f.name for f in token_pb2.ApiToken.DESCRIPTOR.fields} == {
        "token_id",
        "role",
        "tenant_id",
        "node_id",
        "create_time",
        "revoke_time",
    }
    metadata = (("authorization", f"Bearer {control_plane.operator_token}"),)
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        stub = token_pb2_grpc.TokenServiceStub(channel)
        listed = await stub.ListTokens(token_pb2.ListTokensRequest(), metadata=metadata, timeout=15)
        revoked = await stub.RevokeToken(
            token_pb2.RevokeTokenRequest(token_id=token_id_of(plaintexts[0])), metadata=metadata, timeout=15
        )
    assert len(listed.tokens) == 3
    wire = listed.SerializeToString() + revoked.SerializeToString()
    for plaintext in plaintexts:
        parts = token_format.split(plaintext)
        assert parts is not None
        secret = parts[1]
        for leaked in (secret, hashlib.sha256(secret.encode()).hexdigest()):
            assert leaked.encode() not in wire


async def test_the_blocking_client_lists_and_revokes(control_plane: RunningControlPlane) -> None:
    def run() -> tuple[list[str], str | None]:
        with Client(control_plane.address, control_plane.operator_token, timeout=15) as client:
            created = client.create_agent_token("node-a")
            revoked = client.revoke_token(created.token_id)
            return [t.role for t in client.iter_tokens(page_size=1)], revoked.node_id

    roles, node_id = await asyncio.to_thread(run)
    assert sorted(roles) == ["AGENT", "OPERATOR"]
    assert node_id == "node-a"


# Who may call ----------------------------------------------------------------------------------


async def test_tenants_and_agents_may_call_no_token_method(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """PERMISSION_DENIED ROLE_NOT_ALLOWED for every method, even revoking the caller's own token."""
    tenant_token = (await operator.create_tenant("acme")).token
    agent_token = (await operator.create_agent_token("node-a")).token
    operator_id = await operator_token_id(operator)
    for token in (tenant_token, agent_token):
        async with control_plane.client(token) as caller:
            calls: list[Awaitable[object]] = [
                caller.create_agent_token("node-a"),
                caller.create_operator_token(),
                caller.list_tokens(),
                caller.revoke_token(operator_id),
                caller.revoke_token(token_id_of(token)),
            ]
            for attempt in calls:
                with pytest.raises(PermissionDeniedError) as denied:
                    await attempt
                assert denied.value.reason == "ROLE_NOT_ALLOWED"
    assert all(t.revoke_time is None for t in await every_token(operator))
    assert len(await every_token(operator, role="AGENT")) == 1
    assert len(await every_token(operator, role="OPERATOR")) == 1


async def test_revoking_a_pasted_whole_token_never_echoes_its_secret(operator: AsyncClient) -> None:
    """An operator pastes the token instead of its id: refused, naming the id to pass, and the
    secret appears nowhere in the error (it would land in terminals and CI logs)."""
    await operator.create_tenant("acme")
    token = (await operator.create_tenant_token("acme")).token
    token_id, secret = token_format.split(token) or ("", "")
    with pytest.raises(InvalidArgumentError) as caught:
        await operator.revoke_token(token)
    error = caught.value
    shown = " ".join([str(error), *error.field_violations.values(), *error.metadata.values()])
    assert list(error.field_violations) == ["token_id"]
    assert repr(token_id) in error.field_violations["token_id"]
    assert secret not in shown
    assert not any(t.revoke_time for t in await every_token(operator, tenant_id="acme"))

"""``gpucloud tokens create-agent | create-operator | list | revoke``: the token shown once, listings without
secrets, a revoke that says when, and bad values that exit 2 naming their option."""

from __future__ import annotations

import asyncio

from tests.clients.cli.test_commands import connect, document
from tests.clients.cli.test_connection import gpucloud
from tests.conftest import RunningControlPlane


async def run(plane: RunningControlPlane, *args: str) -> tuple[int, str]:
    return await asyncio.to_thread(gpucloud, *connect(plane), *args)


async def test_create_agent_prints_the_token_once_and_it_works(control_plane: RunningControlPlane) -> None:
    code, output = await run(control_plane, "tokens", "create-agent", "node-a")
    assert code == 0, output
    assert "shown once" in output
    code, output = await run(control_plane, "tokens", "create-agent", "node-a", "--json")
    assert code == 0, output
    created = document(output)
    assert set(created) == {"node_id", "token_id", "token"}
    assert created["token"].startswith(f"gpc_{created['token_id']}_")
    async with control_plane.client(created["token"]) as agent:
        assert (
            await agent.register_node(
                "node-a",
                gpu_model="H100",
                gpu_uuids=[f"GPU-a-{i}" for i in range(8)],
                zone="z",
                rack="r",
                leaf_switch="l",
            )
        ).state == "BURN_IN"


async def test_create_operator_then_revoke_the_old_one_rotates_the_operator_token(
    control_plane: RunningControlPlane,
) -> None:
    code, output = await run(control_plane, "tokens", "create-operator", "--json")
    assert code == 0, output
    created = document(output)
    assert set(created) == {"token_id", "token"}
    assert created["token"].startswith(f"gpc_{created['token_id']}_")
    old_id = control_plane.operator_token.split("_")[1]
    code, output = await asyncio.to_thread(
        gpucloud, "--addr", control_plane.address, "--token", created["token"], "tokens", "revoke", old_id
    )
    assert code == 0, output
    code, output = await run(control_plane, "tokens", "list")  # with the old token
    assert code == 1, output
    assert "UNAUTHENTICATED" in output
    code, output = await asyncio.to_thread(
        gpucloud, "--addr", control_plane.address, "--token", created["token"], "tokens", "create-operator"
    )
    assert code == 0, output
    assert "operator token" in output
    assert "shown once" in output


async def test_list_shows_tokens_without_secrets_filtered_and_all_pages(control_plane: RunningControlPlane) -> None:
    async with control_plane.client() as operator:
        tenant = await operator.create_tenant("acme")
        agents = [await operator.create_agent_token(f"node-{i}") for i in range(3)]
    code, output = await run(control_plane, "tokens", "list")
    assert code == 0, output
    assert all(a.token_id in output for a in agents)
    assert tenant.token_id in output
    for secret in (tenant.token, *(a.token for a in agents), control_plane.operator_token):
        assert secret not in output
    code, output = await run(control_plane, "tokens", "list", "--role", "agent", "--page-size", "1", "--all", "--json")
    assert code == 0, output
    listed = document(output)
    assert [t["token_id"] for t in listed["items"]] == [a.token_id for a in reversed(agents)]  # newest first
    assert listed["next_page_token"] == ""
    assert all("token" not in t and t["revoke_time"] is None for t in listed["items"])
    code, output = await run(control_plane, "tokens", "list", "--node", "node-1", "--json")
    assert [t["token_id"] for t in document(output)["items"]] == [agents[1].token_id]
    code, output = await run(control_plane, "tokens", "list", "--tenant", "acme", "--page-size", "1", "--json")
    assert code == 0, output
    assert [t["tenant_id"] for t in document(output)["items"]] == ["acme"]


async def test_revoke_says_when_and_is_safe_to_repeat(control_plane: RunningControlPlane) -> None:
    async with control_plane.client() as operator:
        created = await operator.create_agent_token("node-a")
    code, output = await run(control_plane, "tokens", "revoke", created.token_id, "--json")
    assert code == 0, output
    revoked = document(output)
    assert (revoked["token_id"], revoked["role"], revoked["node_id"]) == (created.token_id, "AGENT", "node-a")
    assert revoked["revoke_time"] is not None
    code, output = await run(control_plane, "tokens", "revoke", created.token_id)
    assert code == 0, output
    assert "Revoked" in output
    assert created.token_id in output
    code, output = await run(control_plane, "tokens", "revoke", created.token_id, "--json")
    assert document(output)["revoke_time"] == revoked["revoke_time"]


async def test_tenants_create_names_the_token_id_to_revoke(control_plane: RunningControlPlane) -> None:
    code, output = await run(control_plane, "tenants", "create", "acme", "--json")
    assert code == 0, output
    created = document(output)
    assert created["token"].startswith(f"gpc_{created['token_id']}_")
    code, output = await run(control_plane, "tenants", "create", "globex")
    assert code == 0, output
    assert "token id (to revoke it): " in output


async def test_tenants_token_prints_the_token_and_its_id(control_plane: RunningControlPlane) -> None:
    """The token alone on its line (scripts take it with ``$(...)``), its id beside it to revoke
    it by; ``--json`` gives both."""
    async with control_plane.client() as operator:
        await operator.create_tenant("acme")
    code, output = await run(control_plane, "tenants", "token", "acme")
    assert code == 0, output
    # stdout and stderr come mixed here, with the in-process server's log lines among them.
    (token,) = [line for line in output.splitlines() if line.startswith("gpc_")]
    assert f"\ntoken id (to revoke it): {token.split('_')[1]}\n" in f"\n{output}\n"
    code, output = await run(control_plane, "tenants", "token", "acme", "--json")
    assert code == 0, output
    rotated = document(output)
    assert set(rotated) == {"tenant_id", "token_id", "token"}
    assert rotated["token"].startswith(f"gpc_{rotated['token_id']}_")
    assert rotated["token"] != token


async def test_bad_values_name_their_option(control_plane: RunningControlPlane) -> None:
    """A value the client or the server refuses exits 2 naming the option; an unknown token or
    the last operator token exits 1 with its reason."""
    code, output = await run(control_plane, "tokens", "list", "--role", "admin")
    assert code == 2, output
    assert "--role: unknown token role 'admin'" in output
    code, output = await run(control_plane, "tokens", "list", "--node", "Node_1")
    assert code == 2, output
    assert "--node (node_id)" in output
    code, output = await run(control_plane, "tokens", "create-agent", "Bad Node")
    assert code == 2, output
    assert "NODE_ID" in output
    code, output = await run(control_plane, "tokens", "revoke", "0123456789abcdef")
    assert code == 1, output
    assert "TOKEN_NOT_FOUND" in output
    async with control_plane.client() as operator:
        (own,) = (await operator.list_tokens(role="OPERATOR")).items
    code, output = await run(control_plane, "tokens", "revoke", own.token_id)
    assert code == 1, output
    assert "LAST_OPERATOR_TOKEN" in output

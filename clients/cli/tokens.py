"""``gpucloud tokens ...``: mint agent and operator tokens, list and revoke any token (operator)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer
from rich.table import Table

from clients import models
from clients.cli import render
from clients.cli.context import call, call_and_show
from clients.cli.listing import show_listing
from clients.cli.options import AllPages, JsonFlag, PageSize, PageToken

tokens = typer.Typer(
    help="API tokens: mint agent and operator tokens, list and revoke tokens (operator).", no_args_is_help=True
)


def tokens_table(items: Sequence[models.ApiToken], title: str = "Tokens") -> Table:
    """Tokens: id, role, whom each speaks for, when it was made and revoked; never a secret."""
    return render.table(
        title,
        ["TOKEN", "ROLE", "TENANT", "NODE", "CREATED", "REVOKED"],
        items,
        lambda t: [
            t.token_id,
            t.role,
            t.tenant_id or "",
            t.node_id or "",
            render.when(t.create_time),
            render.when(t.revoke_time),
        ],
    )


@tokens.command("list")
def tokens_list(
    ctx: typer.Context,
    tenant: Annotated[str, typer.Option(help="Only this tenant's tokens.")] = "",
    node_id: Annotated[str, typer.Option("--node", help="Only the agent tokens of this node.")] = "",
    role: Annotated[str | None, typer.Option(help="OPERATOR, TENANT or AGENT.")] = None,
    page_size: PageSize = 0,
    page_token: PageToken = "",
    all_pages: AllPages = False,
    json_out: JsonFlag = False,
) -> None:
    """List tokens, newest first, revoked ones too; secrets are never shown."""
    show_listing(
        ctx,
        lambda client, token: client.list_tokens(
            tenant_id=tenant, node_id=node_id, role=role, page_size=page_size, page_token=token
        ),
        page_token=page_token,
        all_pages=all_pages,
        json_out=json_out,
        as_table=tokens_table,
    )


@tokens.command("create-agent")
def tokens_create_agent(ctx: typer.Context, node_id: str, json_out: JsonFlag = False) -> None:
    """Mint an agent token for a node (registered or not yet) and print it once."""
    created = call(ctx, lambda c: c.create_agent_token(node_id))
    if json_out:
        render.print_json({"node_id": node_id, "token_id": created.token_id, "token": created.token})
        return
    render.console.print(f"agent token {created.token_id} for node {node_id}", highlight=False, markup=False)
    render.console.print(f"token (shown once): [bold]{created.token}[/bold]")


@tokens.command("create-operator")
def tokens_create_operator(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """Mint another operator token and print it once. To rotate: switch to it, then revoke the old one."""
    created = call(ctx, lambda c: c.create_operator_token())
    if json_out:
        render.print_json({"token_id": created.token_id, "token": created.token})
        return
    render.console.print(f"operator token {created.token_id}", highlight=False, markup=False)
    render.console.print(f"token (shown once): [bold]{created.token}[/bold]")


@tokens.command("revoke")
def tokens_revoke(ctx: typer.Context, token_id: str, json_out: JsonFlag = False) -> None:
    """Revoke a token: this server refuses it at once, other replicas within 5 s. Revoking again is harmless."""
    call_and_show(ctx, lambda c: c.revoke_token(token_id), json_out, tokens_table, "Revoked")

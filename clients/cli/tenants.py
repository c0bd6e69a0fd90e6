"""``gpucloud tenants ...``: create tenants, list and show them, issue their tokens (operator)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from clients.async_client import AsyncClient
from clients.cli import render
from clients.cli.context import call, call_and_show
from clients.cli.listing import add_list_command
from clients.cli.options import JsonFlag

tenants = typer.Typer(help="Tenants and their tokens (operator).", no_args_is_help=True)


@tenants.command("create")
def tenants_create(
    ctx: typer.Context,
    tenant_id: str,
    display_name: Annotated[str, typer.Option("--name")] = "",
    json_out: JsonFlag = False,
) -> None:
    """Create a tenant and print its first token (shown once)."""
    created = call(ctx, lambda c: c.create_tenant(tenant_id, display_name))
    if json_out:
        render.print_json({"tenant": created.tenant, "token": created.token, "token_id": created.token_id})
        return
    render.console.print(render.tenants_table([created.tenant], "Created tenant"))
    render.console.print(f"token (shown once): [bold]{created.token}[/bold]")
    render.console.print(f"token id (to revoke it): {created.token_id}", highlight=False, markup=False)


add_list_command(tenants, "List tenants.", AsyncClient.list_tenants, render.tenants_table)


@tenants.command("get")
def tenants_get(ctx: typer.Context, tenant_id: str, json_out: JsonFlag = False) -> None:
    """Show one tenant."""
    call_and_show(ctx, lambda c: c.get_tenant(tenant_id), json_out, render.tenants_table, "Tenant")


@tenants.command("token")
def tenants_token(ctx: typer.Context, tenant_id: str, json_out: JsonFlag = False) -> None:
    """Issue another token for a tenant (rotation); prints it once, on stdout alone (for
    `$(...)`), and its id, to revoke it by, on stderr."""
    created = call(ctx, lambda c: c.create_tenant_token(tenant_id))
    if json_out:
        render.print_json({"tenant_id": tenant_id, "token_id": created.token_id, "token": created.token})
        return
    print(created.token)
    render.errors.print(Text(f"token id (to revoke it): {created.token_id}"), soft_wrap=True)

"""``gpucloud tenants ...``: create tenants, list and show them, issue their tokens, and set
their quotas of each GPU model (operator); a tenant may list its own quotas."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from clients.async_client import AsyncClient
from clients.cli import render
from clients.cli.context import call, call_and_show, int32
from clients.cli.listing import add_list_command
from clients.cli.options import JsonFlag

tenants = typer.Typer(
    help="Tenants, their tokens and their quotas (operator; a tenant may list its own quotas).", no_args_is_help=True
)


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


@tenants.command("quota")
def tenants_quota(
    ctx: typer.Context,
    tenant_id: Annotated[str, typer.Argument(help="The tenant.")],
    gpu_model: Annotated[str, typer.Argument(help="A100, H100, H200, B200 or L40S.")],
    nodes: Annotated[int, typer.Argument(parser=int32, help="Nodes of the model it may hold of its own, 0-100,000.")],
    borrow_limit: Annotated[
        int,
        typer.Option(parser=int32, help="How many more it may borrow of what its cohort leaves unused, 0-100,000."),
    ] = 0,
    cohort: Annotated[
        str, typer.Option(help="Tenants of one cohort lend one another their unused quota (default: none).")
    ] = "",
    json_out: JsonFlag = False,
) -> None:
    """Set a tenant's quota of one GPU model, and what it may borrow of its cohort's.

    Its creates over the quota wait PENDING (QUOTA_EXCEEDED) without holding up other tenants
    (`allocations create --fail-if-unavailable` refuses them instead); within its own quota it
    reclaims what its cohort borrowed, the scheduler preempting the borrowers' allocations,
    lowest priority first. Allocations held already stay."""
    call_and_show(
        ctx,
        lambda c: c.set_quota(tenant_id, gpu_model, nodes, borrow_limit=borrow_limit, cohort=cohort),
        json_out,
        render.quotas_table,
        "Quota",
    )


@tenants.command("quotas")
def tenants_quotas(
    ctx: typer.Context,
    tenant_id: Annotated[str, typer.Argument(help="Only this tenant's (operators; tenants see only their own).")] = "",
    json_out: JsonFlag = False,
) -> None:
    """Quotas by tenant and GPU model, with the nodes each tenant holds.

    USED counts the nodes of the tenant's ACTIVE allocations of the model. A tenant without a
    quota of a model is not limited."""
    found = call(ctx, lambda c: c.list_quotas(tenant_id=tenant_id))
    render.show_one(found, json_out, render.quotas_table(found, "Quotas"))

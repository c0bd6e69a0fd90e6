"""``gpucloud audit isolation``: every node's fabric partitions checked against whom the node
belongs to (operator); exits 1 when it finds a violation, so a script or a cron job can act."""

from __future__ import annotations

import typer

from clients.cli import render
from clients.cli.context import EXIT_ERROR, call
from clients.cli.options import JsonFlag

audit = typer.Typer(help="Audits of the fleet (operator).", no_args_is_help=True)


@audit.command("isolation")
def audit_isolation(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """List every node in two partitions, free but still in a tenant's partition, or held by one
    tenant but in another's; exit 1 when there is any."""
    found = call(ctx, lambda client: client.audit_isolation())
    if json_out:
        render.print_json(found)
    elif found.violations:
        render.console.print(render.isolation_table(found.violations, "Isolation violations"))
        render.console.print(f"{len(found.violations)} violation(s) on {found.nodes_checked} node(s) checked")
    else:
        render.console.print(f"no violation: {found.nodes_checked} node(s) checked")
    if found.violations:
        raise typer.Exit(EXIT_ERROR)

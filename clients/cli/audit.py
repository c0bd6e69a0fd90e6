"""``gpucloud audit isolation``: every node's fabric partitions checked against whom the node
belongs to (operator); exits 4 when it finds a violation (1 is a failed call), so a script or a
cron job can tell the two apart."""

from __future__ import annotations

import typer

from clients.cli import render
from clients.cli.context import call
from clients.cli.options import JsonFlag

audit = typer.Typer(help="Audits of the fleet (operator).", no_args_is_help=True)

# The audit ran and found violations; 1 stays a call that failed.
EXIT_VIOLATIONS = 4


@audit.command("isolation")
def audit_isolation(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """List every node in two partitions, free but still in a tenant's partition, or held by one
    tenant but in another's; exit 4 when there is any (1: the audit itself failed)."""
    found = call(ctx, lambda client: client.audit_isolation())
    if json_out:
        render.print_json(found)
    elif found.violations:
        render.console.print(render.isolation_table(found.violations, "Isolation violations"))
        render.console.print(f"{len(found.violations)} violation(s) on {found.nodes_checked} node(s) checked")
    else:
        render.console.print(f"no violation: {found.nodes_checked} node(s) checked")
    if found.violations:
        raise typer.Exit(EXIT_VIOLATIONS)

"""``gpucloud operations ...``: show, list and wait for the long-running operations (a cancel's
release of its nodes)."""

from __future__ import annotations

from typing import Annotated

import typer

from clients.async_client import AsyncClient
from clients.cli import render
from clients.cli.context import call, call_and_show, check_wait_timeout, exit_not_done
from clients.cli.listing import add_list_command
from clients.cli.options import JsonFlag

operations = typer.Typer(help="Long-running operations.", no_args_is_help=True)


@operations.command("get")
def operations_get(ctx: typer.Context, name: str, json_out: JsonFlag = False) -> None:
    """Show one operation (operations/<id>)."""
    call_and_show(ctx, lambda c: c.get_operation(name), json_out, render.operations_table, "Operation")


@operations.command("wait")
def operations_wait(
    ctx: typer.Context,
    name: str,
    timeout: Annotated[float, typer.Option(min=0, help="Seconds to wait at most.")] = 60.0,
    json_out: JsonFlag = False,
) -> None:
    """Wait for an operation to finish; exit code 3 if it did not within the timeout."""
    check_wait_timeout(timeout)
    with render.console.status(f"waiting for {name}..."):
        operation = call(ctx, lambda c: c.wait_operation(name, timeout=timeout))
    render.show_one(operation, json_out, render.operations_table([operation], "Operation"))
    if not operation.done:
        exit_not_done(operation, timeout)


add_list_command(operations, "List operations, newest first.", AsyncClient.list_operations, render.operations_table)

"""``gpucloud allocations ...``: allocate whole nodes (safe to retry with the same request id),
list and show allocations, and cancel them, waiting for the release if asked."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from clients import models
from clients.async_client import AsyncClient
from clients.cli import render
from clients.cli.context import EXIT_USAGE, call_and_show, call_noting, check_wait_timeout, exit_not_done, int32
from clients.cli.listing import show_listing
from clients.cli.options import AllPages, JsonFlag, PageSize, PageToken
from clients.errors import DeadlineExceededError, UnavailableError
from clients.request_ids import new_request_id

allocations = typer.Typer(help="Allocate and release whole nodes.", no_args_is_help=True)


@allocations.command("create")
def allocations_create(
    ctx: typer.Context,
    gpu_model: Annotated[str, typer.Option(help="A100, H100, H200, B200 or L40S.")],
    nodes_: Annotated[int, typer.Option("--nodes", parser=int32, help="Whole nodes, all or nothing.")] = 1,
    tenant: Annotated[str, typer.Option(help="Operators: the tenant to allocate for.")] = "",
    request_id: Annotated[str | None, typer.Option(help="Idempotency key; default a fresh UUIDv7.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Allocate whole nodes of one GPU model. When the outcome is unknown (the server did not
    answer), the command names the key it sent: run it again with that --request-id to get the
    allocation the first try may have made instead of a second one; such a rerun says it was
    replayed (JSON: "replayed": true)."""
    if request_id is not None and not request_id:
        # An unset shell variable ("--request-id $RID") must not quietly become a fresh key:
        # the script's retry would then allocate twice.
        render.fail("--request-id: must not be empty; leave the option out for a fresh key")
        raise typer.Exit(EXIT_USAGE)
    key = request_id or new_request_id()
    outcome_unknown = False

    async def create(client: AsyncClient) -> models.CreatedAllocation:
        nonlocal outcome_unknown
        try:
            return await client.create_allocation(
                gpu_model=gpu_model, node_count=nodes_, tenant_id=tenant, request_id=key
            )
        except (UnavailableError, DeadlineExceededError):
            outcome_unknown = True
            raise

    def unknown_outcome() -> str | None:
        if not outcome_unknown:
            return None
        return f"the outcome is unknown; to retry safely run the same command with --request-id {key}"

    allocation = call_noting(ctx, create, unknown_outcome)
    if json_out:
        render.print_json(allocation)
        return
    render.console.print(render.allocations_table([allocation], "Allocated"))
    if allocation.replayed:
        render.errors.print(
            Text(f"replayed: an earlier call with --request-id {key} made this allocation; nothing new was allocated"),
            soft_wrap=True,
        )


@allocations.command("list")
def allocations_list(
    ctx: typer.Context,
    tenant: Annotated[str, typer.Option(help="Operators: only this tenant.")] = "",
    state: Annotated[str | None, typer.Option(help="ACTIVE, CANCELLING or CANCELLED.")] = None,
    page_size: PageSize = 0,
    page_token: PageToken = "",
    all_pages: AllPages = False,
    json_out: JsonFlag = False,
) -> None:
    """List allocations, newest first."""
    show_listing(
        ctx,
        lambda client, token: client.list_allocations(
            tenant_id=tenant, state=state, page_size=page_size, page_token=token
        ),
        page_token=page_token,
        all_pages=all_pages,
        json_out=json_out,
        as_table=render.allocations_table,
    )


@allocations.command("get")
def allocations_get(ctx: typer.Context, allocation_id: str, json_out: JsonFlag = False) -> None:
    """Show one allocation."""
    call_and_show(ctx, lambda c: c.get_allocation(allocation_id), json_out, render.allocations_table, "Allocation")


@allocations.command("cancel")
def allocations_cancel(
    ctx: typer.Context,
    allocation_id: str,
    wait: Annotated[bool, typer.Option(help="Wait until every node is released.")] = False,
    timeout: Annotated[
        float, typer.Option(min=0, help="With --wait: seconds to wait at most (then exit code 3).")
    ] = 600.0,
    json_out: JsonFlag = False,
) -> None:
    """Cancel an allocation; prints the operation that tracks the release. With --wait, exit
    code 3 if the nodes are not released within --timeout, as `operations wait`."""
    check_wait_timeout(timeout)
    accepted: models.Operation | None = None

    async def run(client: AsyncClient) -> models.Operation:
        nonlocal accepted
        operation = accepted = await client.cancel_allocation(allocation_id)
        if wait and not operation.done:
            # Named before the wait: the cancel stands whatever becomes of the wait, and this
            # name is how to follow it (on stderr, so that --json output stays one document).
            render.errors.print(
                Text(f"cancel accepted: {operation.name}; waiting for {operation.nodes_total} node(s) to be released")
            )
            with render.console.status(f"releasing {operation.nodes_total} node(s)..."):
                operation = await client.wait_operation(operation.name, timeout=timeout)
        return operation

    def cancel_accepted() -> str | None:
        # The wait failed, not the cancel: say so under the error, or the user may cancel again.
        if accepted is None:
            return None
        return f"the cancel was accepted; wait for it with: gpucloud operations wait {accepted.name}"

    operation = call_noting(ctx, run, cancel_accepted)
    render.show_one(operation, json_out, render.operations_table([operation], "Cancel"))
    if wait and not operation.done:
        exit_not_done(operation, timeout)

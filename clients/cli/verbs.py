"""Client verbs: ``gpucloud tenants|nodes|allocations|operations ...``."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Annotated, NoReturn, TypeVar

import typer
from rich.table import Table
from rich.text import Text

from clients import models
from clients.async_client import AsyncClient
from clients.cli import render
from clients.cli.context import EXIT_USAGE, call, int32
from clients.errors import DeadlineExceededError, UnavailableError
from clients.request_ids import new_request_id

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables and text.")]
PageSize = Annotated[int, typer.Option(parser=int32, help="Items per page (0: server default).")]
PageToken = Annotated[str, typer.Option(help="Continue from a previous page's next_page_token.")]
AllPages = Annotated[
    bool, typer.Option("--all", help="Follow next_page_token to the end (from --page-token's page, if given).")
]

tenants = typer.Typer(help="Tenants and their tokens (operator).", no_args_is_help=True)
nodes = typer.Typer(help="The fleet: register, inspect and change node lifecycle (operator).", no_args_is_help=True)
allocations = typer.Typer(help="Allocate and release whole nodes.", no_args_is_help=True)
operations = typer.Typer(help="Long-running operations.", no_args_is_help=True)


T = TypeVar("T")

# An operation waited for did not finish within the wait (``operations wait``, ``cancel --wait``).
EXIT_NOT_DONE = 3


def _check_wait(timeout: float) -> None:
    """Exit 2 unless ``--timeout`` is a finite number of seconds, 0 or more: the option's ``min=0``
    lets inf through (and nan, in some typer versions). Checked before the command does anything:
    a cancel carried out stands, whatever the wait then says."""
    if not (math.isfinite(timeout) and timeout >= 0):
        render.fail(f"--timeout {timeout}: must be a finite number of seconds, 0 or more")
        raise typer.Exit(EXIT_USAGE)


def show_page(page: models.Page[T], json_out: bool, as_table: Table) -> None:
    """Print one page of a listing: as JSON (items and the next page token), or as the table
    with a line naming the --page-token of the next page."""
    if json_out:
        render.print_json({"items": page.items, "next_page_token": page.next_page_token})
        return
    render.console.print(as_table)
    if page.next_page_token:
        # Unwrapped, however narrow the terminal: a token folded over lines cannot be pasted back.
        render.console.print(f"[dim]more: --page-token {page.next_page_token}[/dim]", soft_wrap=True)


# Tenants --------------------------------------------------------------------------------------


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


@tenants.command("list")
def tenants_list(
    ctx: typer.Context, page_size: PageSize = 0, page_token: PageToken = "", json_out: JsonFlag = False
) -> None:
    """List tenants."""
    page = call(ctx, lambda c: c.list_tenants(page_size=page_size, page_token=page_token))
    show_page(page, json_out, render.tenants_table(page.items))


@tenants.command("get")
def tenants_get(ctx: typer.Context, tenant_id: str, json_out: JsonFlag = False) -> None:
    """Show one tenant."""
    tenant = call(ctx, lambda c: c.get_tenant(tenant_id))
    render.print_json(tenant) if json_out else render.console.print(render.tenants_table([tenant], "Tenant"))


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


# Nodes ----------------------------------------------------------------------------------------


@nodes.command("register")
def nodes_register(
    ctx: typer.Context,
    node_id: str,
    gpu_model: Annotated[str, typer.Option(help="A100, H100, H200, B200 or L40S.")],
    zone: Annotated[str, typer.Option()],
    rack: Annotated[str, typer.Option()],
    leaf_switch: Annotated[str, typer.Option()],
    gpu_uuid: Annotated[list[str], typer.Option(help="Repeat 8 times, in index order.")],
    json_out: JsonFlag = False,
) -> None:
    """Register a node with its 8 GPUs; it enters burn-in."""
    node = call(
        ctx,
        lambda c: c.register_node(
            node_id, gpu_model=gpu_model, gpu_uuids=gpu_uuid, zone=zone, rack=rack, leaf_switch=leaf_switch
        ),
    )
    render.print_json(node) if json_out else render.console.print(render.nodes_table([node], "Registered"))


@nodes.command("list")
def nodes_list(
    ctx: typer.Context,
    state: Annotated[str | None, typer.Option(help="Only nodes in this state, e.g. READY.")] = None,
    gpu_model: Annotated[str | None, typer.Option(help="Only this GPU model.")] = None,
    zone: Annotated[str, typer.Option(help="Only this zone.")] = "",
    page_size: PageSize = 0,
    page_token: PageToken = "",
    json_out: JsonFlag = False,
) -> None:
    """List nodes, ordered by id."""
    page = call(
        ctx,
        lambda c: c.list_nodes(state=state, gpu_model=gpu_model, zone=zone, page_size=page_size, page_token=page_token),
    )
    show_page(page, json_out, render.nodes_table(page.items))


@nodes.command("get")
def nodes_get(ctx: typer.Context, node_id: str, json_out: JsonFlag = False) -> None:
    """Show one node."""
    node = call(ctx, lambda c: c.get_node(node_id))
    render.print_json(node) if json_out else render.console.print(render.nodes_table([node], "Node"))


@nodes.command("events")
def nodes_events(
    ctx: typer.Context, node_id: str, page_size: PageSize = 0, page_token: PageToken = "", json_out: JsonFlag = False
) -> None:
    """Why a node is in its state: its recorded changes, oldest first."""
    page = call(ctx, lambda c: c.list_node_events(node_id, page_size=page_size, page_token=page_token))
    show_page(page, json_out, render.node_events_table(page.items, f"Events of {node_id}"))


Reason = Annotated[str, typer.Option(help="Recorded with the change.")]


def _node_verb(name: str, doc: str, method: str, *, takes_reason: bool = True) -> None:
    """Register ``gpucloud nodes <name>``, calling ``AsyncClient.<method>``; with ``--reason``
    only where the request carries one (uncordon's does not)."""

    def show(ctx: typer.Context, action: Callable[[AsyncClient], Awaitable[models.Node]], json_out: bool) -> None:
        node = call(ctx, action)
        render.print_json(node) if json_out else render.console.print(render.nodes_table([node], name))

    def with_reason(ctx: typer.Context, node_id: str, reason: Reason = "", json_out: JsonFlag = False) -> None:
        show(ctx, lambda client: getattr(client, method)(node_id, reason), json_out)

    def without_reason(ctx: typer.Context, node_id: str, json_out: JsonFlag = False) -> None:
        show(ctx, lambda client: getattr(client, method)(node_id), json_out)

    verb: Callable[..., None] = with_reason if takes_reason else without_reason
    verb.__doc__ = doc
    nodes.command(name)(verb)


_node_verb("cordon", "Stop new placements on a node (state unchanged).", "cordon_node")
_node_verb("uncordon", "Allow placements on a node again.", "uncordon_node", takes_reason=False)
_node_verb("drain", "Take a node out of service (allocated nodes drain first).", "drain_node")
_node_verb("repair", "QUARANTINED -> REPAIR.", "start_repair")
_node_verb("return", "QUARANTINED or REPAIR -> BURN_IN.", "return_to_service")
_node_verb("retire", "Retire a node for good.", "retire_node")


@nodes.command("burn-in")
def nodes_burn_in(
    ctx: typer.Context,
    node_id: str,
    failed: Annotated[bool, typer.Option("--failed", help="Record a failure (node is quarantined).")] = False,
    detail: Annotated[str, typer.Option()] = "",
    json_out: JsonFlag = False,
) -> None:
    """Record a burn-in result: passed -> READY, --failed -> QUARANTINED."""
    node = call(ctx, lambda c: c.complete_burn_in(node_id, passed=not failed, detail=detail))
    render.print_json(node) if json_out else render.console.print(render.nodes_table([node], "Burn-in recorded"))


# Allocations ----------------------------------------------------------------------------------


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

    try:
        allocation = call(ctx, create)
    except typer.Exit:
        if outcome_unknown:
            render.errors.print(
                Text(f"the outcome is unknown; to retry safely run the same command with --request-id {key}"),
                soft_wrap=True,
            )
        raise
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

    async def fetch(client: AsyncClient) -> models.Page[models.Allocation]:
        if not all_pages:
            return await client.list_allocations(
                tenant_id=tenant, state=state, page_size=page_size, page_token=page_token
            )
        pages = client.iter_allocations(tenant_id=tenant, state=state, page_size=page_size, page_token=page_token)
        items = [a async for a in pages]
        return models.Page(items, "")

    page = call(ctx, fetch)
    show_page(page, json_out, render.allocations_table(page.items))


@allocations.command("get")
def allocations_get(ctx: typer.Context, allocation_id: str, json_out: JsonFlag = False) -> None:
    """Show one allocation."""
    allocation = call(ctx, lambda c: c.get_allocation(allocation_id))
    if json_out:
        render.print_json(allocation)
    else:
        render.console.print(render.allocations_table([allocation], "Allocation"))


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
    _check_wait(timeout)
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

    try:
        operation = call(ctx, run)
    except typer.Exit:
        if accepted is not None:
            # The wait failed, not the cancel: say so under the error, or the user may cancel again.
            render.errors.print(
                Text(f"the cancel was accepted; wait for it with: gpucloud operations wait {accepted.name}"),
                soft_wrap=True,
            )
        raise
    if json_out:
        render.print_json(operation)
    else:
        render.console.print(render.operations_table([operation], "Cancel"))
    if wait and not operation.done:
        _not_done(operation, timeout)


def _not_done(operation: models.Operation, timeout: float) -> NoReturn:
    """Exit 3, saying why on stderr (the output above is the operation as it stands)."""
    render.errors.print(
        Text(f"not done after {timeout:g} s; wait again with: gpucloud operations wait {operation.name}"),
        soft_wrap=True,
    )
    raise typer.Exit(EXIT_NOT_DONE)


# Operations -----------------------------------------------------------------------------------


@operations.command("get")
def operations_get(ctx: typer.Context, name: str, json_out: JsonFlag = False) -> None:
    """Show one operation (operations/<id>)."""
    operation = call(ctx, lambda c: c.get_operation(name))
    render.print_json(operation) if json_out else render.console.print(
        render.operations_table([operation], "Operation")
    )


@operations.command("wait")
def operations_wait(
    ctx: typer.Context,
    name: str,
    timeout: Annotated[float, typer.Option(min=0, help="Seconds to wait at most.")] = 60.0,
    json_out: JsonFlag = False,
) -> None:
    """Wait for an operation to finish; exit code 3 if it did not within the timeout."""
    _check_wait(timeout)
    with render.console.status(f"waiting for {name}..."):
        operation = call(ctx, lambda c: c.wait_operation(name, timeout=timeout))
    render.print_json(operation) if json_out else render.console.print(
        render.operations_table([operation], "Operation")
    )
    if not operation.done:
        _not_done(operation, timeout)


@operations.command("list")
def operations_list(
    ctx: typer.Context, page_size: PageSize = 0, page_token: PageToken = "", json_out: JsonFlag = False
) -> None:
    """List operations, newest first."""
    page = call(ctx, lambda c: c.list_operations(page_size=page_size, page_token=page_token))
    show_page(page, json_out, render.operations_table(page.items))

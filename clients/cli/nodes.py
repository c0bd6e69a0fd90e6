"""``gpucloud nodes ...``: register nodes, inspect them and their events, watch the fleet's
states, and move nodes through their lifecycle: cordon, drain, burn-in, repair, retire (operator)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.live import Live

from clients import listings, models
from clients.async_client import AsyncClient
from clients.cli import render
from clients.cli.context import EXIT_USAGE, call, call_and_show
from clients.cli.fleet_watch import FleetSummary, FleetWatch, summary_json
from clients.cli.listing import show_listing
from clients.cli.options import JsonFlag, PageSize, PageToken
from clients.cli.times import duration_option

nodes = typer.Typer(help="The fleet: register, inspect and change node lifecycle (operator).", no_args_is_help=True)


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
    call_and_show(
        ctx,
        lambda c: c.register_node(
            node_id, gpu_model=gpu_model, gpu_uuids=gpu_uuid, zone=zone, rack=rack, leaf_switch=leaf_switch
        ),
        json_out,
        render.nodes_table,
        "Registered",
    )


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
    show_listing(
        ctx,
        lambda client, token: client.list_nodes(
            state=state, gpu_model=gpu_model, zone=zone, page_size=page_size, page_token=token
        ),
        page_token=page_token,
        json_out=json_out,
        as_table=render.nodes_table,
    )


@nodes.command("get")
def nodes_get(ctx: typer.Context, node_id: str, json_out: JsonFlag = False) -> None:
    """Show one node."""
    call_and_show(ctx, lambda c: c.get_node(node_id), json_out, render.nodes_table, "Node")


@nodes.command("events")
def nodes_events(
    ctx: typer.Context, node_id: str, page_size: PageSize = 0, page_token: PageToken = "", json_out: JsonFlag = False
) -> None:
    """Why a node is in its state: its recorded changes, oldest first."""
    show_listing(
        ctx,
        lambda client, token: client.list_node_events(node_id, page_size=page_size, page_token=token),
        page_token=page_token,
        json_out=json_out,
        as_table=lambda events: render.node_events_table(events, f"Events of {node_id}"),
    )


Reason = Annotated[str, typer.Option(help="Recorded with the change.")]


def _node_verb(name: str, doc: str, method: str, *, takes_reason: bool = True) -> None:
    """Register ``gpucloud nodes <name>``, calling ``AsyncClient.<method>``; with ``--reason``
    only where the request carries one (uncordon's does not)."""

    def with_reason(ctx: typer.Context, node_id: str, reason: Reason = "", json_out: JsonFlag = False) -> None:
        call_and_show(ctx, lambda client: getattr(client, method)(node_id, reason), json_out, render.nodes_table, name)

    def without_reason(ctx: typer.Context, node_id: str, json_out: JsonFlag = False) -> None:
        call_and_show(ctx, lambda client: getattr(client, method)(node_id), json_out, render.nodes_table, name)

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
    call_and_show(
        ctx,
        lambda c: c.complete_burn_in(node_id, passed=not failed, detail=detail),
        json_out,
        render.nodes_table,
        "Burn-in recorded",
    )


async def _read_fleet(client: AsyncClient, gpu_model: str | None, zone: str) -> list[models.Node]:
    """Every node the filters select, over all pages of the listing."""

    def page_of(token: str) -> Awaitable[models.Page[models.Node]]:
        return client.list_nodes(gpu_model=gpu_model, zone=zone, page_token=token)

    return [node async for page in listings.pages(page_of, "") for node in page.items]


def _print_json_line(summary: FleetSummary, _: FleetWatch) -> None:
    # Flushed at once: a script reading the lines must not wait for a pipe's buffer to fill.
    print(json.dumps(summary_json(summary)), flush=True)


def _print_table(summary: FleetSummary, watch: FleetWatch) -> None:
    render.console.print(render.fleet_table(summary, watch.recent))


async def _watch(
    client: AsyncClient,
    *,
    gpu_model: str | None,
    zone: str,
    interval: float | None,
    show: Callable[[FleetSummary, FleetWatch], None],
) -> None:
    """Read the fleet and ``show`` the summary; every ``interval`` seconds again, until
    interrupted (once when ``interval`` is None)."""
    watch = FleetWatch()
    while True:
        show(watch.observe(await _read_fleet(client, gpu_model, zone), datetime.now(UTC)), watch)
        if interval is None:
            return
        await asyncio.sleep(interval)


@nodes.command("watch")
def nodes_watch(
    ctx: typer.Context,
    interval: Annotated[str, typer.Option(help="Time between reads, e.g. 2s, 500ms, 1m.")] = "2s",
    gpu_model: Annotated[str | None, typer.Option(help="Only this GPU model.")] = None,
    zone: Annotated[str, typer.Option(help="Only this zone.")] = "",
    once: Annotated[bool, typer.Option("--once", help="Read once, print and exit.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object per read (JSON lines).")] = False,
) -> None:
    """Node counts per state and GPU model, read again every --interval, with the nodes that
    changed state; redrawn in place in a terminal. Ctrl-C ends it."""
    try:
        seconds = duration_option("--interval", interval).total_seconds()
    except ValueError as error:
        render.fail(str(error))
        raise typer.Exit(EXIT_USAGE) from None
    period = None if once else seconds
    try:
        if once or json_out or not render.console.is_terminal:
            show = _print_json_line if json_out else _print_table
            call(ctx, lambda c: _watch(c, gpu_model=gpu_model, zone=zone, interval=period, show=show))
            return
        with Live(console=render.console, auto_refresh=False) as live:

            def redraw(summary: FleetSummary, watch: FleetWatch) -> None:
                live.update(render.fleet_table(summary, watch.recent), refresh=True)

            call(ctx, lambda c: _watch(c, gpu_model=gpu_model, zone=zone, interval=period, show=redraw))
    except KeyboardInterrupt:
        # Ctrl-C is how a watch ends: no traceback, and not a failure.
        raise typer.Exit(0) from None

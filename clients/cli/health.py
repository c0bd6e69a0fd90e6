"""``gpucloud health ...``: the health controller's decisions across the fleet, pausing and
resuming its removals per pool, and sizing each pool's spares (operator). A node's own decisions are among its events:
``gpucloud nodes events NODE``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from clients.cli import render
from clients.cli.context import EXIT_USAGE, call, call_and_show
from clients.cli.listing import show_listing
from clients.cli.options import JsonFlag, PageSize, PageToken
from clients.cli.times import duration_option

health = typer.Typer(help="The health controller's automation, per pool (operator).", no_args_is_help=True)

GpuModelArg = Annotated[str, typer.Argument(help="The pool: a GPU model (H100, A100, ...).")]


@health.command("pause")
def health_pause(
    ctx: typer.Context,
    gpu_model: GpuModelArg,
    reason: Annotated[str, typer.Option(help="Why, recorded with the pause.")] = "",
    json_out: JsonFlag = False,
) -> None:
    """Stop the health controller taking the pool's nodes out of service; its decisions are still
    recorded (HEALTH_HELD events)."""
    call_and_show(
        ctx,
        lambda client: client.set_health_automation(gpu_model, paused=True, reason=reason),
        json_out,
        render.health_automation_table,
        "Health automation",
    )


@health.command("resume")
def health_resume(ctx: typer.Context, gpu_model: GpuModelArg, json_out: JsonFlag = False) -> None:
    """Let the health controller take the pool's nodes out of service again."""
    call_and_show(
        ctx,
        lambda client: client.set_health_automation(gpu_model, paused=False),
        json_out,
        render.health_automation_table,
        "Health automation",
    )


@health.command("pools")
def health_pools(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """Every pool's setting: automated, or paused since when, by whom and why."""
    pools = call(ctx, lambda client: client.get_health_automation())
    render.show_one(pools, json_out, render.health_automation_table(pools, "Health automation"))


@health.command("spares")
def health_spares(
    ctx: typer.Context,
    gpu_model: Annotated[str, typer.Argument(help="The pool to set: a GPU model. Omitted: list every pool.")] = "",
    spares: Annotated[int | None, typer.Argument(help="Free nodes creates must leave for replacements.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Every pool's spares (free nodes creates leave for the health controller's replacements),
    or, given a model and a count, set that pool's."""
    if not gpu_model:
        pools = call(ctx, lambda client: client.list_spare_pools())
        render.show_one(pools, json_out, render.spare_pools_table(pools, "Spare pools"))
        return
    if spares is None:
        render.fail("give the number of spares to keep, as in: gpucloud health spares H100 4")
        raise typer.Exit(EXIT_USAGE)
    count = spares
    call_and_show(
        ctx,
        lambda client: client.set_spare_pool(gpu_model, count),
        json_out,
        render.spare_pools_table,
        "Spare pool",
    )


@health.command("events")
def health_events(
    ctx: typer.Context,
    since: Annotated[str, typer.Option(help="Only decisions this recent: 30m, 1h, 2d.")] = "",
    page_size: PageSize = 0,
    page_token: PageToken = "",
    json_out: JsonFlag = False,
) -> None:
    """The health controller's decisions across the fleet, oldest first: drains with their
    evidence, notices to tenants, removals held back."""
    try:
        start = datetime.now(UTC) - duration_option("--since", since) if since else None
    except ValueError as error:
        render.fail(str(error))
        raise typer.Exit(EXIT_USAGE) from None
    show_listing(
        ctx,
        lambda client, token: client.list_health_events(since=start, page_size=page_size, page_token=token),
        page_token=page_token,
        json_out=json_out,
        as_table=lambda events: render.health_events_table(events, "Health decisions"),
    )

"""``gpucloud health ...``: pause and resume the health controller's removals per pool, and
show each pool's setting (operator). The decisions themselves are node events:
``gpucloud nodes events NODE``."""

from __future__ import annotations

from typing import Annotated

import typer

from clients.cli import render
from clients.cli.context import call, call_and_show
from clients.cli.options import JsonFlag

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

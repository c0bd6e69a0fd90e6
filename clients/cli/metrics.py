"""``gpucloud metrics query|write|outliers``: read per-GPU time series as a table, JSON or a PNG
chart; write samples; list the GPUs far below their peers' median.

Times and steps take the forms of every time option of the command (clients/cli/times.py).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from clients import instants
from clients import metrics as m
from clients.async_client import AsyncClient
from clients.cli import render
from clients.cli.context import call, int32, refuse_unwritable_path, value_error_line
from clients.cli.times import INSTANT_FORMS, duration_option, require_order, time_option

metrics = typer.Typer(
    help="Per-GPU metrics: query them as a table, JSON or a chart; write samples.", no_args_is_help=True
)


def _number(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.6g}"


def summary_row(series: m.Series) -> list[str]:
    """A series' row of the query table: labels, points, their span and min/avg/max/last."""
    import numpy as np  # only for metrics output; see clients/metrics.py

    # Per-step results carry NaN for the steps without samples: points and span count only
    # the steps that hold a value (the JSON keeps every step, empty ones as null).
    present = ~np.isnan(series.values)
    values, times = series.values[present], series.timestamps_ms[present]
    return [
        series.node_id,
        series.gpu,
        series.field,
        str(len(times)),
        render.when(instants.from_ms(int(times[0]))) if len(times) else "-",
        render.when(instants.from_ms(int(times[-1]))) if len(times) else "-",
        _number(float(values.min())) if len(values) else "-",
        _number(float(values.mean())) if len(values) else "-",
        _number(float(values.max())) if len(values) else "-",
        _number(float(values[-1])) if len(values) else "-",
    ]


def stats_line(stats: m.QueryStats, empty_steps: int = 0) -> str:
    """The cost of a query in one line: how much of the store it opened and skipped.
    ``empty_steps``: how many of the points returned are steps without samples."""
    empty = f" ({empty_steps} of them steps without samples)" if empty_steps else ""
    return (
        f"{stats.series_returned} series, {stats.points_returned} points{empty}; segments opened "
        f"{stats.segments_opened} of {stats.segments_total} ({stats.segments_skipped} skipped by time), "
        f"{stats.bytes_read} bytes read, {stats.samples_decoded} samples decoded, {stats.head_samples} from the head"
    )


def result_table(result: m.MetricsResult, title: str) -> Table:
    """One row per series: its labels, how many points, their span and min/avg/max/last."""
    columns = ["NODE", "GPU", "FIELD", "POINTS", "FROM", "TO", "MIN", "AVG", "MAX", "LAST"]
    grid = render.table(title, columns, result.series, summary_row)
    import numpy as np  # only for metrics output; see clients/metrics.py

    empty_steps = sum(int(np.isnan(series.values).sum()) for series in result.series)
    render.add_caption(grid, stats_line(result.stats, empty_steps))
    return grid


def result_json(result: m.MetricsResult) -> dict[str, Any]:
    """Plain JSON: a NaN (a step without samples) becomes null."""
    return {
        "series": [
            {
                "labels": s.labels,
                "timestamps_ms": s.timestamps_ms.tolist(),
                "values": [None if math.isnan(v) else v for v in s.values.tolist()],
            }
            for s in result.series
        ],
        "stats": result.stats,
    }


def plot(result: m.MetricsResult, path: Path, title: str) -> None:
    """Draw every series against UTC time into a PNG (matplotlib's Agg canvas, no display needed)."""
    # Imported here: matplotlib costs about a second to import, and only --plot needs it.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for series in result.series:
        label = (
            f"{series.node_id} gpu {series.gpu} {series.field}" if series.gpu else f"{series.node_id} {series.field}"
        )
        axes.plot(
            series.timestamps_ms.astype("datetime64[ms]"),
            series.values,
            marker="." if len(series.values) < 50 else None,
            label=label,
        )
    if not result.series:
        axes.text(0.5, 0.5, "no samples in the window", ha="center", va="center", transform=axes.transAxes)
    elif len(result.series) <= 12:
        axes.legend(fontsize="small")
    axes.set_title(title)
    axes.set_xlabel("time (UTC)")
    axes.grid(alpha=0.3)
    figure.savefig(path, format="png", dpi=100)


@metrics.command("query")
def metrics_query(
    ctx: typer.Context,
    node: Annotated[list[str] | None, typer.Option("--node", help="Node id (repeat for more; none: all).")] = None,
    gpu: Annotated[list[int] | None, typer.Option("--gpu", parser=int32, help="GPU index (repeat; none: all).")] = None,
    field: Annotated[list[str] | None, typer.Option("--field", help="Field, e.g. power_w (repeat; none: all).")] = None,
    start: Annotated[str, typer.Option(help=f"Window start: {INSTANT_FORMS}.")] = "-1h",
    end: Annotated[str, typer.Option(help=f"Window end: {INSTANT_FORMS}.")] = "now",
    step: Annotated[str | None, typer.Option(help="Aggregate per step, e.g. 1m (default: raw samples).")] = None,
    agg: Annotated[
        str | None, typer.Option(help="With --step: avg (default), min, max, sum, count, last or rate.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    plot_to: Annotated[Path | None, typer.Option("--plot", help="Also draw the series into this PNG.")] = None,
) -> None:
    """Samples (or per-step aggregates) of the selected series in a window."""
    if plot_to is not None:
        refuse_unwritable_path("--plot", plot_to)
    try:
        now = datetime.now(UTC)
        window = (time_option("--start", start, now=now), time_option("--end", end, now=now))
        require_order(*window, start, end)
        step_length = duration_option("--step", step) if step else None
        if agg is not None and step_length is None:
            # Without a step the query returns raw samples: an aggregation would be ignored.
            raise ValueError(f"--agg {agg}: needs --step (without it the query returns raw samples)")
        aggregation = "avg" if agg is None else agg
        m.aggregation_value(aggregation)
    except ValueError as err:
        render.fail(value_error_line(ctx, err))
        raise typer.Exit(2) from None
    nodes, gpus, fields = node or [], gpu or [], field or []

    async def fetch(client: AsyncClient) -> m.MetricsResult:
        if step_length is None:
            return await client.query_metrics(
                start=window[0], end=window[1], node_ids=nodes, gpu_indexes=gpus, fields=fields
            )
        return await client.query_metrics_range(
            start=window[0],
            end=window[1],
            step=step_length,
            aggregation=aggregation,
            node_ids=nodes,
            gpu_indexes=gpus,
            fields=fields,
        )

    result = call(ctx, fetch)
    title = f"{aggregation} per {step}" if step else "samples"
    # render.when shows a time given with an offset (--start ...+01:00) in UTC, as the title says.
    title = f"{', '.join(fields) or 'all fields'}: {title}, {render.when(window[0])} to {render.when(window[1])} UTC"
    if plot_to is not None:
        try:
            plot(result, plot_to, title)
        except OSError as error:
            render.fail(f"--plot {plot_to}: {error.strerror or error}")
            raise typer.Exit(2) from None
    if json_out:
        render.print_json(result_json(result))
        return
    render.console.print(result_table(result, title))
    if plot_to is not None:
        render.console.print(f"chart written to {plot_to}")


@metrics.command("outliers")
def metrics_outliers(
    ctx: typer.Context,
    field: Annotated[str, typer.Option("--field", help="The field compared, e.g. sm_clock_mhz or power_w.")],
    since: Annotated[str, typer.Option(help=f"Window start: {INSTANT_FORMS}.")] = "-10m",
    end: Annotated[str, typer.Option(help=f"Window end: {INSTANT_FORMS}.")] = "now",
    k: Annotated[float, typer.Option("--k", help="Spreads below the median that make an outlier (0: 3).")] = 0.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """GPUs whose average FIELD over the window sits far below the median of their peers (the
    same model under comparable load): more than k spreads, a spread being the median absolute
    deviation scaled by 1.4826, at least 1% of the median (operators)."""
    try:
        now = datetime.now(UTC)
        window = (time_option("--since", since, now=now), time_option("--end", end, now=now))
        require_order(*window, since, end)
    except ValueError as err:
        render.fail(value_error_line(ctx, err))
        raise typer.Exit(2) from None
    found = call(ctx, lambda c: c.list_metric_outliers(field=field, start=window[0], end=window[1], k=k))
    if json_out:
        render.print_json(found)
        return
    span = f"{render.when(window[0])} to {render.when(window[1])} UTC"
    render.console.print(render.peer_groups_table(found.groups, f"{found.field}: peer groups, {span}"))
    render.console.print(render.outliers_table(found.outliers, f"{found.field}: more than {found.k:g} spreads below"))


def _assignments(pairs: list[str]) -> dict[str, float]:
    """``--set FIELD=NUMBER`` values as a mapping; ValueError naming --set for a malformed pair,
    an empty field name, a number that is not finite, or a field given twice (which value
    should win is the user's to say, not the last one's)."""
    values: dict[str, float] = {}
    for pair in pairs:
        name, sep, number = pair.partition("=")
        name = name.strip()
        try:
            value = float(number)
        except ValueError:
            raise ValueError(f"--set {pair!r}: expected FIELD=NUMBER, e.g. power_w=412.5") from None
        if not sep or not name:
            raise ValueError(f"--set {pair!r}: expected FIELD=NUMBER, e.g. power_w=412.5")
        if not math.isfinite(value):
            raise ValueError(f"--set {pair!r}: the number must be finite")
        if name in values:
            raise ValueError(f"--set {pair!r}: {name} is given more than once")
        values[name] = value
    return values


@metrics.command("write")
def metrics_write(
    ctx: typer.Context,
    node_id: str,
    gpu: Annotated[int, typer.Option(parser=int32, help="GPU index.")],
    set_: Annotated[list[str], typer.Option("--set", help="FIELD=NUMBER (repeat).")],
    at: Annotated[str, typer.Option("--time", help=f"The samples' time: {INSTANT_FORMS}.")] = "now",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Write one sample per field for one GPU of a node (operators; an agent for its own node)."""
    try:
        values = _assignments(set_)
        timestamp = instants.to_ms(time_option("--time", at, now=datetime.now(UTC)), "time")
    except ValueError as err:
        render.fail(str(err))
        raise typer.Exit(2) from None
    push = m.NodeSamples(node_id, timestamp, {gpu: values})
    written = call(ctx, lambda c: c.write_samples([push]))
    if json_out:
        render.print_json(written)
    else:
        render.console.print(f"wrote {written.samples_written} sample(s) in {written.series_written} series")

"""``gpucloud invoice``: a period's invoices, recomputed offline from exported files.

Offline mode (``--events``) reads an event log, a price book and optional outages, runs the
accounting library in this process and prints one table per tenant invoice, the anomalies and
the reconciliation (or ``--json``). No server is involved, so anyone holding the export can
audit an invoice. The online mode (the BillingService) is a separate branch of the same command.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Literal

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from accounting import (
    Anomaly,
    InputError,
    Invoice,
    InvoiceRun,
    Period,
    compute_invoices,
    datetime_to_us,
    decimal_text,
    invoice_run_to_json,
    load_events,
    load_outages,
    load_rate_card,
    rfc3339,
)
from clients.cli import render
from clients.cli.times import time_option

EXIT_BAD_INPUT = 2


class UsageProblem(ValueError):
    """The command line itself is incomplete or contradictory."""


@dataclass(frozen=True)
class OfflineInputs:
    """The files and period of an offline run, as given on the command line."""

    events: Path
    rates: Path | None
    start: str | None
    end: str | None
    outages: Path | None = None
    engine: Literal["duckdb", "reference"] = "duckdb"


def compute_offline(inputs: OfflineInputs) -> InvoiceRun:
    """Load the files and compute the run; InputError or UsageProblem on bad input."""
    if inputs.start is None or inputs.end is None:
        raise UsageProblem("offline mode (--events) also needs --start and --end")
    now = datetime.now(UTC)
    try:
        start, end = (
            time_option(option, text, now=now) for option, text in (("--start", inputs.start), ("--end", inputs.end))
        )
    except ValueError as error:
        raise UsageProblem(str(error)) from None
    try:
        period = Period(datetime_to_us(start), datetime_to_us(end))
    except ValueError as error:
        raise UsageProblem(f"--start/--end: {error}") from None
    with _naming("--events"):
        events = load_events(inputs.events)
    with _naming("--rates"):
        # Without --rates, the card the server prices with when started without one.
        rates = load_rate_card(inputs.rates)
    with _naming("--outages"):
        outages = load_outages(inputs.outages) if inputs.outages is not None else []
    return compute_invoices(events, rates, period, outages, engine=inputs.engine)


@contextmanager
def _naming(option: str) -> Iterator[None]:
    """Put ``option`` before what a file it names was refused for (``--rates: r.json:1: not JSON``)."""
    try:
        yield
    except InputError as error:
        raise UsageProblem(f"{option}: {error}") from None


def run_invoice_command(
    events: Path | None,
    rates: Path | None,
    start: str | None,
    end: str | None,
    outages: Path | None,
    engine: str,
    json_out: bool,
    max_anomalies: int,
) -> None:
    """The body of ``gpucloud invoice``: bad input is one line on stderr and exit code 2."""
    try:
        if events is None:
            raise UsageProblem(
                "pass --period YYYY-MM to ask the server, or --events EVENTS.jsonl (with --start, --end) "
                "to compute invoices offline"
            )
        if engine not in ("duckdb", "reference"):
            raise UsageProblem(f"--engine must be duckdb or reference, not {engine!r}")
        run = compute_offline(
            OfflineInputs(events, rates, start, end, outages, "duckdb" if engine == "duckdb" else "reference")
        )
    except (InputError, UsageProblem) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if json_out:
        typer.echo(json.dumps(invoice_run_to_json(run), indent=2))
        return
    render_run(run, Console(), max_anomalies=max_anomalies)


def _hours(seconds: Decimal) -> str:
    return f"{seconds / 3600:.4f}"


def invoice_table(invoice: Invoice, run: InvoiceRun) -> Table:
    """One tenant's lines, with its credit and total in the caption."""
    period = f"{rfc3339(run.period.start_us)} .. {rfc3339(run.period.end_us)}"
    grid = render.table(
        f"Invoice {invoice.tenant_id}  [dim]{period}[/dim]",
        ("MODEL", "CLASS", "GPU-SECONDS", "GPU-HOURS", "RATE/GPU-H", "AMOUNT"),
        invoice.lines,
        lambda line: [
            line.gpu_model,
            line.price_class.value,
            decimal_text(line.gpu_seconds),
            _hours(line.gpu_seconds),
            "-" if line.gpu_hour_rate is None else decimal_text(line.gpu_hour_rate),
            Text.from_markup(render.money(line.amount, run.currency)),
        ],
        right=("GPU-SECONDS", "GPU-HOURS", "RATE/GPU-H", "AMOUNT"),
    )
    render.add_caption(
        grid,
        f"credited for outages: {decimal_text(invoice.credited_gpu_seconds)} GPU-s   "
        f"[bold]total {run.currency} {decimal_text(invoice.total)}[/bold]",
    )
    return grid


def _event_list(anomaly: Anomaly, shown: int = 3) -> str:
    ids = list(anomaly.event_ids)
    more = f" (+{len(ids) - shown})" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def anomalies_table(anomalies: tuple[Anomaly, ...], limit: int) -> Table:
    """The first ``limit`` anomalies (all of them are in --json)."""
    columns = ("KIND", "TENANT", "GPU", "ALLOCATION", "SECONDS", "EVENTS", "DETAIL")
    shown = anomalies[:limit]
    grid = render.table(
        f"Anomalies ({len(anomalies)})",
        columns,
        shown,
        lambda anomaly: [
            anomaly.kind.value,
            anomaly.tenant_id or "",
            anomaly.gpu_uuid or "",
            anomaly.allocation_id or "",
            decimal_text(anomaly.seconds),
            _event_list(anomaly),
            anomaly.detail,
        ],
        right=("SECONDS",),
        empty=render.ANOMALIES_NOT_SHOWN,
    )
    if shown and len(anomalies) > limit:
        render.add_caption(grid, f"{len(anomalies) - limit} more {render.ANOMALIES_NOT_SHOWN}")
    return grid


def reconciliation_table(run: InvoiceRun) -> Table:
    """Where every event and second went, and whether the identities hold."""
    rec = run.reconciliation
    problems = rec.imbalances()
    events = [
        ("in", rec.events_in),
        ("billed", rec.events_billed),
        ("left out as anomalies", rec.events_in_anomalies),
        *((f"  {kind}", count) for kind, count in sorted(rec.extra.items())),
        ("outside the period", rec.events_outside_period),
    ]
    seconds = [
        ("intervals in period", rec.interval_seconds),
        ("same-tenant overlap", rec.same_tenant_overlap_seconds),
        ("credited (outages)", rec.credited_seconds),
        ("usage", rec.usage_seconds),
        ("covered by commitments", rec.committed_covered_seconds),
        ("on usage lines", rec.usage_line_seconds),
        ("  of which unpriced", rec.unpriced_seconds),
        ("cross-tenant overlap", rec.cross_tenant_overlap_seconds),
    ]
    rows = [
        (
            events[n] if n < len(events) else ("", None),
            seconds[n] if n < len(seconds) else ("", None),
        )
        for n in range(max(len(events), len(seconds)))
    ]
    grid = render.table(
        "Reconciliation",
        ("EVENTS", "COUNT", "SECONDS", "GPU-SECONDS"),
        rows,
        lambda row: [
            row[0][0],
            "" if row[0][1] is None else str(row[0][1]),
            row[1][0],
            "" if row[1][1] is None else decimal_text(row[1][1]),
        ],
        right=("COUNT", "GPU-SECONDS"),
    )
    render.add_caption(grid, "[green]balanced[/green]" if not problems else "[red]" + "; ".join(problems) + "[/red]")
    return grid


def render_run(run: InvoiceRun, console: Console, *, max_anomalies: int = 50) -> None:
    """Tables for people: each invoice, the anomalies, the reconciliation."""
    if not run.invoices:
        console.print("[dim]no usage and no commitments in this period[/dim]")
    for invoice in run.invoices:
        console.print(invoice_table(invoice, run))
    if run.anomalies:
        console.print(anomalies_table(run.anomalies, max_anomalies))
    console.print(reconciliation_table(run))

"""Online billing verbs: a tenant's invoice from the BillingService, finalization, and
``gpucloud usage export``, which writes the usage-event log as the JSONL the offline
``gpucloud invoice --events`` reads, so any invoice can be recomputed and audited offline.

``--json`` prints an invoice in the offline command's shapes (lines, anomalies and
reconciliation with the same keys), so the two can be compared with ``jq``; with ``--finalize``
it adds ``newly_finalized``, whether this call froze the invoice.
"""

from __future__ import annotations

import os
import sys
import tempfile
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import IO, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from accounting import (
    BadPeriod,
    EventKind,
    PriceClass,
    UsageEvent,
    datetime_to_us,
    parse_period,
    rfc3339,
    us_to_datetime,
    write_events,
)
from clients import billing
from clients.async_client import AsyncClient
from clients.cli import render
from clients.cli.context import call, refuse_unwritable_path
from clients.cli.times import INSTANT_FORMS, require_order, time_option

EXIT_BAD_INPUT = 2
EXPORT_PAGE_SIZE = 1000
MAX_ANOMALY_ROWS = 20

usage = typer.Typer(help="The usage-event log billing is computed from.", no_args_is_help=True)


class BadOption(ValueError):
    """A command-line value that cannot be used; the message names the option."""


def period_bounds(period: str, *, option: str = "--period") -> tuple[datetime, datetime]:
    """``2026-11`` -> (2026-11-01T00:00Z, 2026-12-01T00:00Z), the server's billing period;
    BadOption naming ``option`` when it is not a period."""
    try:
        parsed = parse_period(period)
    except BadPeriod as error:
        raise BadOption(f"{option} {error}") from None
    return us_to_datetime(parsed.start_us), us_to_datetime(parsed.end_us)


# Online invoice ---------------------------------------------------------------------------------


def online_invoice(
    ctx: typer.Context,
    *,
    tenant: str,
    period: str | None,
    finalize: bool,
    json_out: bool,
    max_anomalies: int = MAX_ANOMALY_ROWS,
) -> None:
    """``gpucloud invoice --period P [--tenant T] [--finalize] [--json]``: ask the BillingService."""
    # Options of the other mode (--events among them) are refused by the command before this.
    problem = (
        "--period YYYY-MM is required online"
        if period is None
        else "--finalize needs --tenant (finalizing is for operators)"
        if finalize and not tenant
        else None
    )
    if problem is None and period is not None:
        try:
            period_bounds(period)
        except BadOption as error:
            problem = str(error)
    if problem is not None or period is None:
        render.fail(str(problem))
        raise typer.Exit(EXIT_BAD_INPUT)
    newly_finalized: bool | None = None
    if finalize:
        result = call(ctx, lambda c: c.finalize_invoice(period, tenant_id=tenant))
        invoice, newly_finalized = result.invoice, result.newly_finalized
        note = "finalized now" if newly_finalized else "was already finalized; unchanged"
    else:
        invoice = call(ctx, lambda c: c.get_invoice(period, tenant_id=tenant))
        note = ""
    if json_out:
        document = invoice_to_json(invoice)
        if newly_finalized is not None:
            # Whether this call froze the invoice: a script must not read it off stderr.
            document["newly_finalized"] = newly_finalized
        render.print_json(document)
        return
    console = render.console
    console.print(invoice_table(invoice))
    if invoice.adjustments:
        console.print(adjustments_table(invoice))
    if invoice.anomalies:
        console.print(anomalies_table(invoice, max_anomalies))
    console.print(reconciliation_line(invoice))
    if note:
        render.errors.print(f"[dim]{invoice.tenant_id} {invoice.period}: {note}[/dim]")


def _dec(value: Decimal | None) -> str | None:
    return None if value is None else format(value, "f")


def _time(value: datetime | None) -> str | None:
    return None if value is None else rfc3339(datetime_to_us(value))


def _klass(name: str) -> str:
    # The offline JSON spells price classes as the accounting library does: "on_demand".
    return name.lower()


def invoice_to_json(invoice: billing.Invoice) -> dict[str, Any]:
    """JSON-ready data; lines, anomalies and reconciliation in the offline command's shapes."""
    rec = invoice.reconciliation
    return {
        "tenant_id": invoice.tenant_id,
        "period": invoice.period,
        "start": _time(invoice.start_time),
        "end": _time(invoice.end_time),
        "currency": invoice.currency,
        "lines": [
            {
                "gpu_model": line.gpu_model,
                "price_class": _klass(line.price_class),
                "gpu_seconds": _dec(line.gpu_seconds),
                "gpu_hour_rate": _dec(line.gpu_hour_rate),
                "amount": _dec(line.amount),
            }
            for line in invoice.lines
        ],
        "credited_gpu_seconds": _dec(invoice.credited_gpu_seconds),
        "subtotal": _dec(invoice.subtotal),
        "adjustments": [
            {
                "adjusted_period": a.adjusted_period,
                "gpu_model": a.gpu_model,
                "price_class": _klass(a.price_class),
                "gpu_seconds": _dec(a.gpu_seconds),
                "amount": _dec(a.amount),
            }
            for a in invoice.adjustments
        ],
        "adjustments_total": _dec(invoice.adjustments_total),
        "total": _dec(invoice.total),
        "anomalies": [
            {
                "kind": a.kind,
                "tenant_id": invoice.tenant_id,
                "gpu_uuid": a.gpu_uuid,
                "allocation_id": a.allocation_id,
                "event_ids": list(a.event_ids),
                "seconds": _dec(a.seconds),
                "detail": a.detail,
            }
            for a in invoice.anomalies
        ],
        "reconciliation": {
            "events_in": rec.events_in,
            "events_billed": rec.events_billed,
            "events_in_anomalies": rec.events_in_anomalies,
            "events_outside_period": rec.events_outside_period,
            "events_in_anomalies_by_kind": dict(sorted(rec.extra.items())),
            "interval_seconds": _dec(rec.interval_seconds),
            "same_tenant_overlap_seconds": _dec(rec.same_tenant_overlap_seconds),
            "credited_seconds": _dec(rec.credited_seconds),
            "usage_seconds": _dec(rec.usage_seconds),
            "committed_covered_seconds": _dec(rec.committed_covered_seconds),
            "usage_line_seconds": _dec(rec.usage_line_seconds),
            "unpriced_seconds": _dec(rec.unpriced_seconds),
            "cross_tenant_overlap_seconds": _dec(rec.cross_tenant_overlap_seconds),
        },
        "finalized": invoice.finalized,
        "finalize_time": _time(invoice.finalize_time),
        "events_watermark_time": _time(invoice.events_watermark_time),
    }


def invoice_table(invoice: billing.Invoice) -> Table:
    """The period's own lines; subtotal, adjustments and total in the caption."""
    state = f"finalized {render.when(invoice.finalize_time)}" if invoice.finalized else "open"
    caption = f"subtotal {invoice.currency} {invoice.subtotal:f}"
    if invoice.adjustments:
        caption += f"   adjustments {invoice.currency} {invoice.adjustments_total:f}"
    grid = render.table(
        f"Invoice {invoice.tenant_id} {invoice.period}  [dim]({state})[/dim]",
        ("MODEL", "CLASS", "GPU-SECONDS", "GPU-HOURS", "RATE/GPU-H", "AMOUNT"),
        invoice.lines,
        lambda line: [
            line.gpu_model,
            _klass(line.price_class),
            f"{line.gpu_seconds:f}",
            f"{line.gpu_seconds / 3600:.4f}",
            "-" if line.gpu_hour_rate is None else f"{line.gpu_hour_rate:f}",
            Text.from_markup(render.money(line.amount, invoice.currency)),
        ],
        right=("GPU-SECONDS", "GPU-HOURS", "RATE/GPU-H", "AMOUNT"),
        empty="no usage in this period",
    )
    render.add_caption(grid, f"{caption}   [bold]total {invoice.currency} {invoice.total:f}[/bold]")
    return grid


def adjustments_table(invoice: billing.Invoice) -> Table:
    """Corrections of earlier, finalized periods carried by this invoice."""
    return render.table(
        "Adjustments for finalized periods",
        ("PERIOD", "MODEL", "CLASS", "GPU-SECONDS", "AMOUNT"),
        invoice.adjustments,
        lambda a: [
            a.adjusted_period,
            a.gpu_model,
            _klass(a.price_class),
            f"{a.gpu_seconds:f}",
            Text.from_markup(render.money(a.amount, invoice.currency)),
        ],
        right=("GPU-SECONDS", "AMOUNT"),
    )


def anomalies_table(invoice: billing.Invoice, limit: int = MAX_ANOMALY_ROWS) -> Table:
    """The first ``limit`` anomalies (``--json`` has all of them)."""
    columns = ("KIND", "GPU", "ALLOCATION", "SECONDS", "EVENTS", "DETAIL")
    shown = invoice.anomalies[:limit]
    grid = render.table(
        f"Anomalies ({len(invoice.anomalies)})",
        columns,
        shown,
        lambda a: [
            a.kind,
            a.gpu_uuid or "",
            a.allocation_id or "",
            f"{a.seconds:f}",
            ", ".join(a.event_ids[:3]) + (f" (+{len(a.event_ids) - 3})" if len(a.event_ids) > 3 else ""),
            a.detail,
        ],
        right=("SECONDS",),
        empty=render.ANOMALIES_NOT_SHOWN,
    )
    if shown and len(invoice.anomalies) > limit:
        render.add_caption(grid, f"{len(invoice.anomalies) - limit} more {render.ANOMALIES_NOT_SHOWN}")
    return grid


def reconciliation_line(invoice: billing.Invoice) -> str:
    """One dim line of rich markup: where the invoice's events went, and its usage in GPU-seconds."""
    rec = invoice.reconciliation
    return (
        f"[dim]events: {rec.events_in} in, {rec.events_billed} billed, "
        f"{rec.events_in_anomalies} left out as anomalies, {rec.events_outside_period} outside the period; "
        f"usage {rec.usage_seconds:f} GPU-s[/dim]"
    )


# Usage export -----------------------------------------------------------------------------------


def _accounting_event(event: billing.UsageEvent) -> UsageEvent:
    """The offline library's form of an event (what ``write_events`` writes)."""
    assert event.event_time is not None
    return UsageEvent(
        event_id=event.event_id,
        tenant_id=event.tenant_id,
        allocation_id=event.allocation_id,
        gpu_uuid=event.gpu_uuid,
        gpu_model=event.gpu_model,
        kind=EventKind(event.kind.lower()),
        at_us=datetime_to_us(event.event_time),
        price_class=PriceClass(event.price_class.lower()),
    )


def export_window(start: str | None, end: str | None, invoice_period: str | None) -> tuple[datetime | None, ...]:
    """The [start, end) to export; ``--invoice-period`` means everything its invoice reads."""
    if invoice_period is not None:
        if start is not None or end is not None:
            raise BadOption("--invoice-period replaces --start/--end; give one or the other")
        return None, period_bounds(invoice_period, option="--invoice-period")[1]
    now = datetime.now(UTC)
    try:
        first, last = (
            None if text is None else time_option(option, text, now=now)
            for option, text in (("--start", start), ("--end", end))
        )
        require_order(first, last, start, end)
    except ValueError as error:
        raise BadOption(str(error)) from None
    return first, last


async def export_events(
    client: AsyncClient,
    stream: IO[str],
    *,
    tenant: str,
    start: datetime | None,
    end: datetime | None,
    progress: Progress,
) -> int:
    """Page through the log into ``stream``; return the number of events written."""
    task = progress.add_task("exporting usage events", total=None)
    count = 0
    try:
        async for page in client.iter_usage_event_pages(
            tenant_id=tenant, start_time=start, end_time=end, page_size=EXPORT_PAGE_SIZE
        ):
            count += write_events((_accounting_event(e) for e in page), stream)
            progress.update(task, completed=count, description=f"exported {count} events")
    except BaseException:
        # The error says what happened; a bar left at "0/?" under it would say nothing.
        progress.update(task, visible=False)
        raise
    progress.update(task, total=count, completed=count)
    return count


@usage.command("export")
def usage_export(
    ctx: typer.Context,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="JSONL file to write (what `gpucloud invoice --events` reads), whole or not at all;"
            " - for stdout, written as fetched (a failed export leaves what came before it).",
        ),
    ],
    tenant: Annotated[str, typer.Option(help="Only this tenant's events (tenants always get only their own).")] = "",
    start: Annotated[str | None, typer.Option(help=f"Events at or after this time: {INSTANT_FORMS}.")] = None,
    end: Annotated[str | None, typer.Option(help=f"Events before this time: {INSTANT_FORMS}.")] = None,
    invoice_period: Annotated[
        str | None, typer.Option(help="YYYY-MM: exactly the events that period's invoice is computed from.")
    ] = None,
) -> None:
    """Write the usage-event log as JSONL, oldest first, so invoices can be recomputed offline."""
    try:
        window = export_window(start, end, invoice_period)
    except BadOption as error:
        render.fail(str(error))
        raise typer.Exit(EXIT_BAD_INPUT) from None
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    )
    if str(out) == "-":
        # To a pipe: written as it is fetched (nothing to rename), the bar on stderr.
        with progress:
            count = call(
                ctx,
                lambda c: export_events(
                    c, sys.stdout, tenant=tenant, start=window[0], end=window[1], progress=progress
                ),
            )
        sys.stdout.flush()
        render.errors.print(f"wrote {count} usage events to stdout", highlight=False)
        return
    refuse_unwritable_path("--out", out)
    # Written to a temporary file beside ``out`` and renamed at the end: whole or not at all.
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream, progress:
                count = call(
                    ctx,
                    lambda c: export_events(
                        c, stream, tenant=tenant, start=window[0], end=window[1], progress=progress
                    ),
                )
            os.replace(temporary, out)
        finally:
            Path(temporary).unlink(missing_ok=True)
    except OSError as error:
        render.fail(f"--out {out}: {error.strerror or error}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    render.errors.print(f"wrote {count} usage events to {out}", highlight=False)
    if invoice_period is not None:
        first, last = (rfc3339(datetime_to_us(t)) for t in period_bounds(invoice_period, option="--invoice-period"))
        # A command to paste: one line however narrow the terminal, and the path as typed.
        render.errors.print(
            Text(f"audit: gpucloud invoice --events {out} [--rates RATES.json] --start {first} --end {last}", "dim"),
            soft_wrap=True,
        )

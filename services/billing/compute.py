"""Builds invoices from logged events with the accounting library. CPU-bound and blocking:
``services/billing/commands.py`` runs it in a worker thread (``asyncio.to_thread``), never on
the event loop.

The DuckDB engine is the same code the offline ``gpucloud invoice --events`` runs, so an
invoice served here and one recomputed from an export agree line for line.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import NamedTuple

from accounting import BillingPeriod, Rates, compute_invoices
from services.billing import codec
from services.billing.invoice import Adjustment, FrozenInvoice, InputCounts, InvoiceView, LateEvents
from services.billing.rules import (
    LoggedEvent,
    adjustment_sources,
    invoice_events,
    late_event_ids,
    outstanding,
)


def period_invoice(tenant_id: str, period: BillingPeriod, events: Sequence[LoggedEvent], rates: Rates) -> InvoiceView:
    """The period's own invoice from ``events`` (already the tenant's), with no adjustments."""
    selected = invoice_events(events, period)
    run = compute_invoices([e.event for e in selected], rates, period.span)
    mine = [invoice for invoice in run.invoices if invoice.tenant_id == tenant_id]
    if len(mine) > 1:
        raise AssertionError(f"the engine returned {len(mine)} invoices for tenant {tenant_id}")
    invoice = mine[0] if mine else None
    return InvoiceView(
        tenant_id=tenant_id,
        period=period,
        currency=run.currency,
        lines=invoice.lines if invoice else (),
        credited_gpu_seconds=invoice.credited_gpu_seconds if invoice else Decimal(0),
        subtotal=invoice.total if invoice else Decimal(0),
        adjustments=(),
        anomalies=run.anomalies,
        late_events=(),
        reconciliation=run.reconciliation,
        watermark_us=max((e.recorded_us for e in selected), default=None),
    )


def _input_counts(periods: Sequence[BillingPeriod], events: Sequence[LoggedEvent]) -> dict[BillingPeriod, int]:
    """For each period, how many of ``events`` happened before its end."""
    times = sorted(e.event.at_us for e in events)
    return {p: bisect.bisect_left(times, p.end_us) for p in periods}


class OpenInvoice(NamedTuple):
    """An open period's invoice and the event counts it read, for itself and for each finalized
    period it carries corrections of: what FinalizeInvoice stores with it."""

    view: InvoiceView
    input_counts: InputCounts


def open_invoice(
    tenant_id: str,
    period: BillingPeriod,
    events: Sequence[LoggedEvent],
    rates: Rates,
    finalized: Mapping[BillingPeriod, FrozenInvoice],
) -> OpenInvoice:
    """The invoice of a period that is not finalized: its own usage, plus the outstanding
    corrections of the finalized periods right before it (services/billing/rules.py).

    The engine recomputes a finalized period only when more events before its end are known
    now than any finalization that accounted for it read (``FrozenInvoice.input_counts``):
    the log only grows, so an equal count means the same events, and nothing is outstanding.
    """
    own = period_invoice(tenant_id, period, events, rates)
    sources = adjustment_sources(period, finalized)
    reads = _input_counts([period, *sources], events)
    adjustments: list[Adjustment] = []
    late: list[LateEvents] = []
    for source in sources:
        frozen = finalized[source]
        # Those that accounted for ``source``: itself, and later ones that froze corrections
        # of it (one without a count for it never matches).
        accounted = [f for p, f in finalized.items() if source <= p < period]
        corrections: Sequence[Adjustment] = ()
        if all(f.input_counts.get(source) != reads[source] for f in accounted):
            # Late usage is priced at the rates the period was frozen with, not today's.
            recomputed = period_invoice(tenant_id, source, events, codec.rates_from_json(frozen.rates_json))
            applied = [a for p, f in finalized.items() if p > source for a in f.view.adjustments]
            corrections = outstanding(source, recomputed.lines, frozen.view.lines, applied)
        # The evidence is listed either way: events recorded since the last snapshot, even one
        # that committed in time for that finalization's read (its correction is then zero).
        ids = late_event_ids(events, source, known_before_us=max(f.snapshot_us for f in accounted))
        if corrections or ids:
            seconds = sum((c.gpu_seconds for c in corrections), Decimal(0))
            detail = (
                f"{len(ids)} event(s) of {source} recorded after it was finalized; "
                f"its invoice is unchanged and {len(corrections)} correction line(s) are carried here"
            )
            late.append(LateEvents(source.name, ids, seconds, detail))
        adjustments.extend(corrections)
    view = replace(own, adjustments=tuple(adjustments), late_events=tuple(late))
    return OpenInvoice(view, reads)

"""The billing rules of the control plane, as plain functions (no I/O, no gRPC).

Which events an invoice is computed from
    Every event of the tenant whose time is before the period's end. Earlier events are needed
    because a GPU handed over before the period may still be held inside it; the accounting
    engine clips every interval to the period and counts the rest as outside it. Exporting the
    same events (``gpucloud usage export --tenant T --end <period end>``) reproduces the
    invoice offline exactly.

Where a correction goes
    A finalized invoice never changes. When events of a finalized period arrive later (an agent
    spooled them through an outage), the period is recomputed with everything known now, at
    the rates it was frozen with; the difference from its frozen lines, less the corrections
    already frozen into other finalized invoices, is *outstanding*. Outstanding corrections
    appear as adjustment lines on the first period after it that is not finalized, and are
    frozen with that invoice when it is finalized in turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from accounting import FIRST_PERIOD, BillingPeriod, InvoiceLine, PriceClass, UsageEvent
from services.billing.invoice import Adjustment


@dataclass(frozen=True)
class LoggedEvent:
    """A usage event as the control plane stored it, with the time it was recorded."""

    event: UsageEvent
    recorded_us: int


def invoice_events(events: Iterable[LoggedEvent], period: BillingPeriod) -> list[LoggedEvent]:
    """The events an invoice for ``period`` is computed from: those before the period's end."""
    end = period.end_us
    return [e for e in events if e.event.at_us < end]


def adjustment_sources(period: BillingPeriod, finalized: Iterable[BillingPeriod]) -> list[BillingPeriod]:
    """The finalized periods whose outstanding corrections land on the open ``period``, oldest first.

    They are the run of finalized periods right before it: for each of them, ``period`` is the
    first later period that is not finalized.
    """
    done = set(finalized)
    if period in done:
        raise ValueError(f"{period} is finalized; only an open invoice carries new adjustments")
    sources: list[BillingPeriod] = []
    earlier = period
    while earlier != FIRST_PERIOD and (earlier := earlier.previous()) in done:
        sources.append(earlier)
    return sorted(sources)


_Key = tuple[str, PriceClass]


def _add(
    totals: dict[_Key, list[Decimal | None]], key: _Key, seconds: Decimal, amount: Decimal | None, sign: int
) -> None:
    entry = totals.setdefault(key, [Decimal(0), Decimal(0)])
    assert entry[0] is not None
    entry[0] += sign * seconds
    if amount is None:
        entry[1] = None  # an unpriced line stays unpriced in its corrections
    elif entry[1] is not None:
        entry[1] += sign * amount


def outstanding(
    adjusted: BillingPeriod,
    recomputed: Sequence[InvoiceLine],
    frozen: Sequence[InvoiceLine],
    applied: Iterable[Adjustment],
) -> tuple[Adjustment, ...]:
    """What ``adjusted``'s invoice says now, minus what it said when frozen, minus corrections of
    it already frozen elsewhere: one signed adjustment per line that differs, in line order."""
    totals: dict[_Key, list[Decimal | None]] = {}
    for line in recomputed:
        _add(totals, (line.gpu_model, line.price_class), line.gpu_seconds, line.amount, +1)
    for line in frozen:
        _add(totals, (line.gpu_model, line.price_class), line.gpu_seconds, line.amount, -1)
    for adjustment in applied:
        if adjustment.adjusted_period == adjusted.name:
            key = (adjustment.gpu_model, adjustment.price_class)
            _add(totals, key, adjustment.gpu_seconds, adjustment.amount, -1)
    result = []
    for (gpu_model, price_class), (seconds, amount) in sorted(totals.items()):
        assert seconds is not None
        if seconds == 0 and not amount:
            continue
        result.append(Adjustment(adjusted.name, gpu_model, price_class, seconds, amount))
    return tuple(result)


def late_event_ids(events: Iterable[LoggedEvent], adjusted: BillingPeriod, *, known_before_us: int) -> tuple[str, ...]:
    """Events inside ``adjusted`` recorded at or after ``known_before_us`` (the snapshot of the
    last finalization that accounted for the period): the ones its corrections come from."""
    start, end = adjusted.start_us, adjusted.end_us
    return tuple(
        sorted(e.event.event_id for e in events if start <= e.event.at_us < end and e.recorded_us >= known_before_us)
    )

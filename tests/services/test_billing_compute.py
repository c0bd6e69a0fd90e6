"""Open invoices carry the corrections of the finalized months before them, and only those.

The engine (DuckDB) runs for real here; the finalizations are replayed by hand: each month is
frozen with what was recorded by its snapshot, as FinalizeInvoice does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal

from accounting.model import EventKind, UsageEvent, datetime_to_us
from accounting.periods import BillingPeriod, parse_period
from services.billing import codec
from services.billing.compute import input_counts, open_invoice
from services.billing.invoice import FrozenInvoice
from services.billing.rates import DEFAULT_RATES
from services.billing.rules import LoggedEvent

DAY_S = 86_400


def us(month: int, day: int) -> int:
    return datetime_to_us(datetime(2026, month, day, tzinfo=UTC))


def logged(gpu: str, kind: EventKind, at_us: int, recorded_us: int | None = None) -> LoggedEvent:
    event = UsageEvent(f"alloc-{gpu}/{gpu}/{kind.value}", "acme", f"alloc-{gpu}", gpu, "H100", kind, at_us)
    return LoggedEvent(event, at_us if recorded_us is None else recorded_us)


def finalize_in_order(
    events: Sequence[LoggedEvent], snapshots: Mapping[str, int], *, read_after_snapshot: Sequence[LoggedEvent] = ()
) -> dict[BillingPeriod, FrozenInvoice]:
    """Freeze each month at its snapshot from what was recorded by then (and whatever of
    ``read_after_snapshot`` committed before the read), oldest first, as FinalizeInvoice does."""
    frozen: dict[BillingPeriod, FrozenInvoice] = {}
    for name, snapshot_us in sorted(snapshots.items()):
        known = [e for e in events if e.recorded_us < snapshot_us] + list(read_after_snapshot)
        period = parse_period(name)
        view = open_invoice("acme", period, known, DEFAULT_RATES, frozen)
        counts = input_counts(period, frozen, known)
        frozen[period] = FrozenInvoice(view, codec.rates_to_json(DEFAULT_RATES), snapshot_us, counts)
    return frozen


def test_without_late_events_the_finalized_months_carry_nothing() -> None:
    events = [logged("GPU-1", EventKind.START, us(1, 10)), logged("GPU-1", EventKind.STOP, us(2, 10))]
    frozen = finalize_in_order(events, {"2026-01": us(2, 2), "2026-02": us(3, 2)})
    march = open_invoice("acme", parse_period("2026-03"), events, DEFAULT_RATES, frozen)
    assert march.adjustments == () and march.late_events == ()
    assert [line.gpu_seconds for line in frozen[parse_period("2026-02")].view.lines] == [Decimal(9 * DAY_S)]


def test_a_late_start_corrects_every_finalized_month_it_reaches() -> None:
    """A start in January recorded in March, never stopped: January and February were frozen
    without it. February has no late event of its own, yet owes a whole month."""
    on_time = [logged("GPU-1", EventKind.START, us(1, 10)), logged("GPU-1", EventKind.STOP, us(1, 11))]
    frozen = finalize_in_order(on_time, {"2026-01": us(2, 2), "2026-02": us(3, 2)})
    late = logged("GPU-2", EventKind.START, us(1, 20), recorded_us=us(3, 5))
    march = open_invoice("acme", parse_period("2026-03"), [*on_time, late], DEFAULT_RATES, frozen)
    seconds = {a.adjusted_period: a.gpu_seconds for a in march.adjustments}
    assert seconds == {"2026-01": Decimal(12 * DAY_S), "2026-02": Decimal(28 * DAY_S)}
    assert [(e.adjusted_period, e.event_ids) for e in march.late_events] == [
        ("2026-01", (late.event.event_id,)),
        ("2026-02", ()),
    ]


def test_corrections_frozen_into_a_later_month_are_not_owed_again() -> None:
    """January's late stop was corrected on February, which was then finalized: March, open,
    owes nothing more for January."""
    start = logged("GPU-1", EventKind.START, us(1, 10))
    late_stop = logged("GPU-1", EventKind.STOP, us(1, 20), recorded_us=us(2, 15))
    frozen = finalize_in_order([start, late_stop], {"2026-01": us(2, 2), "2026-02": us(3, 2)})
    february = frozen[parse_period("2026-02")].view
    assert {a.adjusted_period: a.gpu_seconds for a in february.adjustments} == {"2026-01": Decimal(-12 * DAY_S)}
    march = open_invoice("acme", parse_period("2026-03"), [start, late_stop], DEFAULT_RATES, frozen)
    assert march.adjustments == () and march.late_events == ()


def test_an_event_the_frozen_computation_read_is_not_late() -> None:
    """An event recorded after January's snapshot but committed before its read is in the
    frozen invoice: the count says so, and February reports nothing about January."""
    start = logged("GPU-1", EventKind.START, us(1, 10))
    racing_stop = logged("GPU-1", EventKind.STOP, us(1, 20), recorded_us=us(2, 2) + 1)
    frozen = finalize_in_order([start], {"2026-01": us(2, 2)}, read_after_snapshot=[racing_stop])
    assert frozen[parse_period("2026-01")].input_counts == {parse_period("2026-01"): 2}
    february = open_invoice("acme", parse_period("2026-02"), [start, racing_stop], DEFAULT_RATES, frozen)
    assert february.adjustments == () and february.late_events == ()


def test_an_invoice_frozen_without_counts_is_recomputed() -> None:
    """Invoices finalized before counts were stored carry none: their corrections still appear."""
    start = logged("GPU-1", EventKind.START, us(1, 10))
    frozen = finalize_in_order([start], {"2026-01": us(2, 2)})
    january = parse_period("2026-01")
    frozen[january] = FrozenInvoice(frozen[january].view, frozen[january].rates_json, us(2, 2))
    late_stop = logged("GPU-1", EventKind.STOP, us(1, 20), recorded_us=us(2, 5))
    february = open_invoice("acme", parse_period("2026-02"), [start, late_stop], DEFAULT_RATES, frozen)
    assert {a.adjusted_period: a.gpu_seconds for a in february.adjustments} == {"2026-01": Decimal(-12 * DAY_S)}

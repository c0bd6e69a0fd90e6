"""Open invoices carry the corrections of the finalized months before them, and only those.

The engine (DuckDB) runs for real here; the finalizations are replayed by hand: each month is
frozen with what was recorded by its snapshot, with the event counts it read, as
FinalizeInvoice does. Where a test says which months the engine ran for, it watches
``compute.period_invoice`` pass through (the real function still runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from accounting.model import EventKind, Rates, UsageEvent, datetime_to_us
from accounting.periods import BillingPeriod, parse_period
from accounting.rate_card import DEFAULT_RATES
from services.billing import codec, compute
from services.billing.compute import open_invoice
from services.billing.invoice import FrozenInvoice, InvoiceView
from services.billing.rules import LoggedEvent

DAY_S = 86_400


def us(month: int, day: int, year: int = 2026) -> int:
    return datetime_to_us(datetime(year, month, day, tzinfo=UTC))


def logged(gpu: str, kind: EventKind, at_us: int, recorded_us: int | None = None) -> LoggedEvent:
    event = UsageEvent(f"alloc-{gpu}/{gpu}/{kind.value}", "acme", f"alloc-{gpu}", gpu, "H100", kind, at_us)
    return LoggedEvent(event, at_us if recorded_us is None else recorded_us)


def finalize(
    frozen: dict[BillingPeriod, FrozenInvoice], name: str, known: Sequence[LoggedEvent], snapshot_us: int
) -> None:
    """Freeze ``name`` from ``known``, as FinalizeInvoice does with what its read returned."""
    period = parse_period(name)
    result = open_invoice("acme", period, known, DEFAULT_RATES, frozen)
    frozen[period] = FrozenInvoice(result.view, codec.rates_to_json(DEFAULT_RATES), snapshot_us, result.input_counts)


def finalize_in_order(
    events: Sequence[LoggedEvent], snapshots: Mapping[str, int], *, read_after_snapshot: Sequence[LoggedEvent] = ()
) -> dict[BillingPeriod, FrozenInvoice]:
    """Freeze each month at its snapshot from what was recorded by then (and whatever of
    ``read_after_snapshot`` committed before the read), in the order of ``snapshots``."""
    frozen: dict[BillingPeriod, FrozenInvoice] = {}
    for name, snapshot_us in snapshots.items():
        known = [e for e in events if e.recorded_us < snapshot_us] + list(read_after_snapshot)
        finalize(frozen, name, known, snapshot_us)
    return frozen


def read(period: str, events: Sequence[LoggedEvent], frozen: Mapping[BillingPeriod, FrozenInvoice]) -> InvoiceView:
    return open_invoice("acme", parse_period(period), events, DEFAULT_RATES, frozen).view


@pytest.fixture
def engine_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The months the accounting engine is run for, in order."""
    runs: list[str] = []
    real = compute.period_invoice

    def watched(tenant_id: str, period: BillingPeriod, events: Sequence[LoggedEvent], rates: Rates) -> InvoiceView:
        runs.append(period.name)
        return real(tenant_id, period, events, rates)

    monkeypatch.setattr(compute, "period_invoice", watched)
    return runs


def test_without_late_events_the_finalized_months_carry_nothing_and_are_not_recomputed(
    engine_runs: list[str],
) -> None:
    events = [logged("GPU-1", EventKind.START, us(1, 10)), logged("GPU-1", EventKind.STOP, us(2, 10))]
    frozen = finalize_in_order(events, {"2026-01": us(2, 2), "2026-02": us(3, 2)})
    assert [line.gpu_seconds for line in frozen[parse_period("2026-02")].view.lines] == [Decimal(9 * DAY_S)]
    engine_runs.clear()
    march = read("2026-03", events, frozen)
    assert march.adjustments == ()
    assert march.late_events == ()
    assert engine_runs == ["2026-03"]


def test_a_late_start_corrects_every_finalized_month_it_reaches(engine_runs: list[str]) -> None:
    """A start in January recorded in March, never stopped: January and February were frozen
    without it. February has no late event of its own, yet owes a whole month."""
    on_time = [logged("GPU-1", EventKind.START, us(1, 10)), logged("GPU-1", EventKind.STOP, us(1, 11))]
    frozen = finalize_in_order(on_time, {"2026-01": us(2, 2), "2026-02": us(3, 2)})
    late = logged("GPU-2", EventKind.START, us(1, 20), recorded_us=us(3, 5))
    engine_runs.clear()
    march = read("2026-03", [*on_time, late], frozen)
    seconds = {a.adjusted_period: a.gpu_seconds for a in march.adjustments}
    assert seconds == {"2026-01": Decimal(12 * DAY_S), "2026-02": Decimal(28 * DAY_S)}
    assert [(e.adjusted_period, e.event_ids) for e in march.late_events] == [
        ("2026-01", (late.event.event_id,)),
        ("2026-02", ()),
    ]
    assert engine_runs == ["2026-03", "2026-01", "2026-02"]


def test_corrections_frozen_into_a_later_month_are_not_owed_again(engine_runs: list[str]) -> None:
    """January's late stop was corrected on February, which was then finalized: March, open,
    owes nothing more for January, and February's counts spare January the engine."""
    start = logged("GPU-1", EventKind.START, us(1, 10))
    late_stop = logged("GPU-1", EventKind.STOP, us(1, 20), recorded_us=us(2, 15))
    frozen = finalize_in_order([start, late_stop], {"2026-01": us(2, 2), "2026-02": us(3, 2)})
    february = frozen[parse_period("2026-02")].view
    assert {a.adjusted_period: a.gpu_seconds for a in february.adjustments} == {"2026-01": Decimal(-12 * DAY_S)}
    engine_runs.clear()
    march = read("2026-03", [start, late_stop], frozen)
    assert march.adjustments == ()
    assert march.late_events == ()
    assert engine_runs == ["2026-03"]


def test_an_event_read_by_the_finalization_is_listed_but_owes_nothing(engine_runs: list[str]) -> None:
    """A stop recorded just after January's snapshot but committed before its read is in the
    frozen invoice: February names it as evidence, carries no correction, and the engine does
    not run for January (the count is unchanged)."""
    start = logged("GPU-1", EventKind.START, us(1, 10))
    racing_stop = logged("GPU-1", EventKind.STOP, us(1, 20), recorded_us=us(2, 2) + 1)
    frozen = finalize_in_order([start], {"2026-01": us(2, 2)}, read_after_snapshot=[racing_stop])
    assert frozen[parse_period("2026-01")].input_counts == {parse_period("2026-01"): 2}
    engine_runs.clear()
    february = read("2026-02", [start, racing_stop], frozen)
    assert february.adjustments == ()
    assert [(e.adjusted_period, e.event_ids, e.gpu_seconds) for e in february.late_events] == [
        ("2026-01", (racing_stop.event.event_id,), Decimal(0))
    ]
    assert engine_runs == ["2026-02"]


def test_months_finalized_out_of_order_across_a_year_end() -> None:
    """January was finalized before December, so January's counts know nothing of December:
    December's own count decides, and a late December stop is still corrected on February."""
    start = logged("GPU-1", EventKind.START, us(12, 20, year=2025))
    frozen = finalize_in_order([start], {"2026-01": us(2, 2), "2025-12": us(2, 3)})
    assert parse_period("2025-12") not in frozen[parse_period("2026-01")].input_counts
    assert read("2026-02", [start], frozen).adjustments == ()
    late_stop = logged("GPU-1", EventKind.STOP, us(12, 25, year=2025), recorded_us=us(2, 10))
    february = read("2026-02", [start, late_stop], frozen)
    seconds = {a.adjusted_period: a.gpu_seconds for a in february.adjustments}
    assert seconds == {"2025-12": Decimal(-7 * DAY_S), "2026-01": Decimal(-31 * DAY_S)}


def test_an_invoice_frozen_without_counts_is_recomputed(engine_runs: list[str]) -> None:
    """Invoices finalized before counts were stored carry none: their corrections still appear."""
    start = logged("GPU-1", EventKind.START, us(1, 10))
    frozen = finalize_in_order([start], {"2026-01": us(2, 2)})
    january = parse_period("2026-01")
    frozen[january] = FrozenInvoice(frozen[january].view, frozen[january].rates_json, us(2, 2))
    late_stop = logged("GPU-1", EventKind.STOP, us(1, 20), recorded_us=us(2, 5))
    engine_runs.clear()
    february = read("2026-02", [start, late_stop], frozen)
    assert {a.adjusted_period: a.gpu_seconds for a in february.adjustments} == {"2026-01": Decimal(-12 * DAY_S)}
    assert engine_runs == ["2026-02", "2026-01"]

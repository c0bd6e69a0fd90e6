"""One test per billing rule (docs/billing.md), numbers computed by hand, against both engines.

The period is ten hours. H100 costs 2.49 on demand and 1.10 spot per GPU-hour, so one hour on
demand is 2.49, and an amount is gpu_seconds / 3600 * rate rounded half-even to cents.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal

from accounting import AnomalyKind, PriceClass
from tests.accounting.helpers import (
    PERIOD,
    at,
    both_engines,
    held,
    invoice,
    kinds,
    line,
    outage,
    run,
    start,
    stop,
)
from tests.accounting.helpers import anomalies as of_kind

OD, SPOT = PriceClass.ON_DEMAND, PriceClass.SPOT


@both_engines
def test_a_start_and_its_stop_bill_the_time_between(engine: str) -> None:
    result = run(engine, held("a1/g1", "acme", "a1", "g1", 1, 4))
    billed = line(result, "acme", "H100", OD)
    assert billed.gpu_seconds == Decimal(10800)  # 4 h - 1 h = 3 h = 10800 s
    assert billed.amount == Decimal("7.47")  # 3 h * 2.49 = 7.47
    assert invoice(result, "acme").total == Decimal("7.47")
    assert result.anomalies == ()
    assert (result.reconciliation.events_in, result.reconciliation.events_billed) == (2, 2)


@both_engines
def test_an_exact_repeat_is_a_duplicate_event_and_bills_nothing_more(engine: str) -> None:
    events = held("a1/g1", "acme", "a1", "g1", 1, 4)
    result = run(engine, [*events, events[1], events[1]])
    assert line(result, "acme", "H100", OD).gpu_seconds == Decimal(10800)  # still 3 h
    (duplicate,) = of_kind(result, AnomalyKind.DUPLICATE_EVENT)
    assert duplicate.event_ids == ("a1/g1/stop",)
    assert "2 exact repeat(s)" in duplicate.detail
    rec = result.reconciliation
    assert (rec.events_in, rec.events_billed, rec.events_in_anomalies) == (4, 2, 2)
    assert rec.extra == {"DUPLICATE_EVENT": 2}


@both_engines
def test_a_conflicting_repeat_loses_to_the_first_copy_in_input_order(engine: str) -> None:
    first, later = stop("s", "acme", "a1", "g1", 4), stop("s", "acme", "a1", "g1", 6)
    begin = start("b", "acme", "a1", "g1", 1)

    kept_first = run(engine, [begin, first, later])
    assert line(kept_first, "acme", "H100", OD).gpu_seconds == Decimal(10800)  # stop at 4 h stands: 3 h
    (conflict,) = of_kind(kept_first, AnomalyKind.CONFLICTING_DUPLICATE)
    assert conflict.event_ids == ("s",)
    assert "at_us" in conflict.detail

    kept_later = run(engine, [begin, later, first])
    assert line(kept_later, "acme", "H100", OD).gpu_seconds == Decimal(18000)  # stop at 6 h stands: 5 h


@both_engines
def test_a_start_while_started_is_a_duplicate_start_and_the_earlier_one_stands(engine: str) -> None:
    events = [
        start("s1", "acme", "a1", "g1", 1),
        start("s2", "acme", "a1", "g1", 2),
        stop("end", "acme", "a1", "g1", 4),
    ]
    result = run(engine, events)
    assert line(result, "acme", "H100", OD).gpu_seconds == Decimal(10800)  # from 1 h, not 2 h: 3 h
    (duplicate,) = of_kind(result, AnomalyKind.DUPLICATE_START)
    assert duplicate.event_ids == ("s2",)
    assert "s1" in duplicate.detail
    assert result.reconciliation.extra == {"DUPLICATE_START": 1}


@both_engines
def test_a_stop_with_no_start_is_reported_and_not_billed(engine: str) -> None:
    result = run(engine, [stop("orphan", "acme", "a1", "g1", 5), *held("b", "beta", "b1", "g2", 0, 1)])
    assert [i.tenant_id for i in result.invoices] == ["beta"]  # acme has nothing to pay
    (orphan,) = of_kind(result, AnomalyKind.STOP_WITHOUT_START)
    assert (orphan.tenant_id, orphan.event_ids) == ("acme", ("orphan",))
    assert result.reconciliation.events_in_anomalies == 1


@both_engines
def test_a_stop_stamped_before_its_start_bills_neither(engine: str) -> None:
    """A clock behind by a minute stamps the release before the placement: the start, with no
    stop after it, used to bill to the period's end (and every later period's) while its stop
    was an orphan. Now both are one STOP_BEFORE_START and nothing is billed for them."""
    skewed = [start("s", "acme", "a1", "g1", 5), stop("e", "acme", "a1", "g1", 5 - 1 / 60)]
    result = run(engine, [*skewed, *held("b", "beta", "b1", "g2", 0, 1)])
    assert [i.tenant_id for i in result.invoices] == ["beta"]
    (early,) = of_kind(result, AnomalyKind.STOP_BEFORE_START)
    assert (early.tenant_id, early.allocation_id, early.event_ids) == ("acme", "a1", ("e", "s"))
    assert "60 s before its start" in early.detail
    assert kinds(result) == [AnomalyKind.STOP_BEFORE_START]
    assert result.reconciliation.extra == {"STOP_BEFORE_START": 2}
    assert result.reconciliation.imbalances() == []


@both_engines
def test_a_stray_stop_before_a_stopped_start_stays_an_orphan(engine: str) -> None:
    """Only a start that nothing stops takes the stop before it as its own."""
    events = [stop("x", "acme", "a1", "g1", 1), *held("h", "acme", "a1", "g1", 2, 3)]
    result = run(engine, events)
    assert line(result, "acme", "H100", OD).gpu_seconds == Decimal(3600)
    assert kinds(result) == [AnomalyKind.STOP_WITHOUT_START]


@both_engines
def test_a_start_never_stopped_is_billed_to_the_period_end_and_flagged(engine: str) -> None:
    result = run(engine, [start("open", "acme", "a1", "g1", 7)])
    billed = line(result, "acme", "H100", OD)
    assert billed.gpu_seconds == Decimal(10800)  # 10 h - 7 h = 3 h
    assert billed.amount == Decimal("7.47")
    (still_open,) = of_kind(result, AnomalyKind.OPEN_AT_PERIOD_END)
    assert (still_open.event_ids, still_open.seconds) == (("open",), Decimal(10800))
    assert result.reconciliation.events_billed == 1  # billed, and flagged for information


@both_engines
def test_a_start_and_stop_at_one_instant_are_zero_length(engine: str) -> None:
    result = run(engine, held("z", "acme", "a1", "g1", 2, 2))
    assert result.invoices == ()
    (zero,) = of_kind(result, AnomalyKind.ZERO_LENGTH)
    assert zero.event_ids == ("z/start", "z/stop")
    assert result.reconciliation.extra == {"ZERO_LENGTH": 2}


@both_engines
def test_intervals_are_clipped_to_the_period_and_those_outside_are_counted(engine: str) -> None:
    events = [
        *held("before", "acme", "a1", "g1", -2, 3),  # billed from the period start: 3 h
        *held("after", "acme", "a2", "g2", 8, 12),  # billed to the period end: 2 h
        *held("later", "acme", "a3", "g3", 11, 12),  # entirely after: not billed
        *held("earlier", "acme", "a4", "g4", -5, -1),  # entirely before: not billed
        *held("edge", "acme", "a5", "g5", 10, 11),  # starts at the (excluded) period end
    ]
    result = run(engine, events)
    assert line(result, "acme", "H100", OD).gpu_seconds == Decimal(18000)  # 3 h + 2 h = 5 h
    assert line(result, "acme", "H100", OD).amount == Decimal("12.45")  # 5 h * 2.49
    rec = result.reconciliation
    assert (rec.events_in, rec.events_billed, rec.events_outside_period) == (10, 4, 6)
    assert result.anomalies == ()


@both_engines
def test_touching_intervals_on_one_gpu_are_not_an_overlap(engine: str) -> None:
    events = [*held("x", "acme", "a1", "g1", 1, 3), *held("y", "beta", "b1", "g1", 3, 5)]
    result = run(engine, events)
    assert result.anomalies == ()  # [1, 3) and [3, 5) share no instant
    assert line(result, "beta", "H100", OD).gpu_seconds == Decimal(7200)  # 2 h


@both_engines
def test_overlapping_intervals_of_one_tenant_on_one_gpu_count_once(engine: str) -> None:
    events = [*held("x", "acme", "a1", "g1", 1, 4), *held("y", "acme", "a2", "g1", 3, 6)]
    result = run(engine, events)
    billed = line(result, "acme", "H100", OD)
    assert billed.gpu_seconds == Decimal(18000)  # union [1 h, 6 h) = 5 h, not 3 h + 3 h
    assert billed.amount == Decimal("12.45")
    (overlap,) = of_kind(result, AnomalyKind.SAME_TENANT_OVERLAP)
    assert overlap.seconds == Decimal(3600)  # [3 h, 4 h) counted once
    assert overlap.event_ids == ("x/start", "x/stop", "y/start", "y/stop")
    assert result.reconciliation.same_tenant_overlap_seconds == Decimal(3600)


@both_engines
def test_two_tenants_on_one_gpu_is_a_breach_each_billed_its_own_time(engine: str) -> None:
    events = [*held("x", "acme", "a1", "g1", 1, 4), *held("y", "beta", "b1", "g1", 3, 5)]
    result = run(engine, events)
    assert line(result, "acme", "H100", OD).amount == Decimal("7.47")  # 3 h * 2.49
    assert line(result, "beta", "H100", OD).amount == Decimal("4.98")  # 2 h * 2.49
    breaches = of_kind(result, AnomalyKind.CROSS_TENANT_OVERLAP)
    assert [(b.tenant_id, b.seconds, b.other_tenant_ids) for b in breaches] == [
        ("acme", Decimal(3600), ("beta",)),  # shared [3 h, 4 h)
        ("beta", Decimal(3600), ("acme",)),
    ]
    assert breaches[0].event_ids == ("x/start", "x/stop")


@both_engines
def test_outages_are_credited_once_however_often_reported(engine: str) -> None:
    events = held("x", "acme", "a1", "g1", 0, 10)
    outages = [outage("g1", 2, 3), outage("g1", 2, 3), outage("g1", 2.5, 4), outage("g2", 0, 10)]
    result = run(engine, events, outages)
    billed = line(result, "acme", "H100", OD)
    assert billed.gpu_seconds == Decimal(28800)  # 10 h - [2 h, 4 h) = 8 h
    assert billed.amount == Decimal("19.92")  # 8 h * 2.49
    assert invoice(result, "acme").credited_gpu_seconds == Decimal(7200)  # 2 h, not 1 + 1 + 1.5


@both_engines
def test_overlapping_reports_of_one_gpu_do_not_inflate_the_credit(engine: str) -> None:
    """The intersection trap: usage [0, 6) and [2, 8) on one GPU, outage [4, 5): credit 1 h, not 2."""
    events = [*held("x", "acme", "a1", "g1", 0, 6), *held("y", "acme", "a2", "g1", 2, 8)]
    result = run(engine, events, [outage("g1", 4, 5)])
    assert invoice(result, "acme").credited_gpu_seconds == Decimal(3600)  # |[0, 8) & [4, 5)| = 1 h
    assert line(result, "acme", "H100", OD).gpu_seconds == Decimal(25200)  # 8 h - 1 h = 7 h
    rec = result.reconciliation
    # 6 h + 6 h of intervals = 7 h billed + 4 h overlap + 1 h credited
    assert (rec.interval_seconds, rec.same_tenant_overlap_seconds) == (Decimal(43200), Decimal(14400))


@both_engines
def test_on_demand_takes_precedence_over_spot_on_one_gpu(engine: str) -> None:
    events = [*held("od", "acme", "a1", "g1", 0, 4), *held("sp", "acme", "a2", "g1", 2, 6, spot=True)]
    result = run(engine, events)
    assert line(result, "acme", "H100", OD).amount == Decimal("9.96")  # 4 h * 2.49
    spot = line(result, "acme", "H100", SPOT)
    assert spot.gpu_seconds == Decimal(7200)  # [4 h, 6 h): its other 2 h are on demand already
    assert spot.amount == Decimal("2.20")  # 2 h * 1.10
    assert kinds(result) == [AnomalyKind.SAME_TENANT_OVERLAP]


@both_engines
def test_usage_with_no_rate_is_an_unpriced_line_left_out_of_the_total(engine: str) -> None:
    events = [*held("a", "acme", "a1", "g9", 0, 2, model="A100"), *held("h", "acme", "a2", "g1", 0, 1)]
    result = run(engine, events)
    unpriced = line(result, "acme", "A100", OD)
    assert (unpriced.gpu_seconds, unpriced.gpu_hour_rate, unpriced.amount) == (Decimal(7200), None, None)
    assert invoice(result, "acme").total == Decimal("2.49")  # only the priced hour of H100
    (anomaly,) = of_kind(result, AnomalyKind.UNPRICED_INTERVAL)
    assert (anomaly.seconds, anomaly.event_ids) == (Decimal(7200), ("a/start", "a/stop"))
    assert result.reconciliation.unpriced_seconds == Decimal(7200)


@both_engines
def test_amounts_round_half_even_once_per_line(engine: str) -> None:
    """T4 costs 0.01 per GPU-hour: half an hour is exactly 0.005, one and a half 0.015."""
    half = run(engine, held("t", "acme", "a1", "g1", 0, 0.5, model="T4"))
    assert line(half, "acme", "T4", OD).amount == Decimal("0.00")  # 0.005 -> even 0.00 (half-up: 0.01)
    three_halves = run(engine, held("t", "acme", "a1", "g1", 0, 1.5, model="T4"))
    assert line(three_halves, "acme", "T4", OD).amount == Decimal("0.02")  # 0.015 -> even 0.02
    # Two half-hour intervals on two GPUs make one line of 1 h = 0.01: rounding is per line.
    two = run(
        engine, [*held("x", "acme", "a1", "g1", 0, 0.5, model="T4"), *held("y", "acme", "a1", "g2", 0, 0.5, model="T4")]
    )
    assert line(two, "acme", "T4", OD).amount == Decimal("0.01")


@both_engines
def test_microseconds_are_exact(engine: str) -> None:
    ends_a_microsecond_late = dataclasses.replace(stop("e", "acme", "a1", "g1", 1), at_us=at(1) + 1)
    result = run(engine, [start("s", "acme", "a1", "g1", 0), ends_a_microsecond_late])
    assert line(result, "acme", "H100", OD).gpu_seconds == Decimal("3600.000001")
    assert result.period == PERIOD

"""The usage-billing suite: a candidate's facts, priced by the library, against the library's
invoices on random logs, and each trap by hand (a ten-hour period; times in hours).

The oracle of the random logs is the library's pure-Python engine (``compute_invoices(...,
engine="reference")``), which tests/accounting/test_engines_agree.py holds equal to the DuckDB
engine: as exact, and fast enough for hypothesis to shrink a difference to the smallest log.

The random logs and the hand-written events are the accounting tests' own builders
(tests/accounting/logs.py, tests/accounting/helpers.py), so the exercise and the library's
tests draw the same inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from hypothesis import HealthCheck, given, settings

from accounting import AnomalyKind, InvoiceRun, Outage, Period, Rates, UsageEvent, compute_invoices
from accounting.pricing import price
from exercises.harness import Implementation, Mistake, needs, under_test
from tests.accounting import logs
from tests.accounting.helpers import PERIOD, RATES, held, outage, start, stop

impl = under_test()
HOUR = Decimal(3600)


def billed(
    impl: Implementation,
    events: Sequence[UsageEvent],
    outages: Sequence[Outage] = (),
    rates: Rates = RATES,
    period: Period = PERIOD,
) -> InvoiceRun:
    """The invoice run the implementation's facts make, priced by the library."""
    return price(impl.compute_facts(events, rates, period, tuple(outages)), rates, period)


def hours(run: InvoiceRun, tenant: str) -> Decimal:
    """The GPU-hours billed to ``tenant`` on usage lines (0 when it has no invoice)."""
    seconds = sum(
        (
            x.gpu_seconds
            for i in run.invoices
            if i.tenant_id == tenant
            for x in i.lines
            if x.price_class.value != "committed"
        ),
        Decimal(0),
    )
    return seconds / HOUR


def credited_hours(run: InvoiceRun, tenant: str) -> Decimal:
    return sum((i.credited_gpu_seconds for i in run.invoices if i.tenant_id == tenant), Decimal(0)) / HOUR


def kinds(run: InvoiceRun) -> list[AnomalyKind]:
    return [a.kind for a in run.anomalies]


MISTAKES = [
    Mistake(
        "forgets_outages",
        "outages are not credited: subtract each GPU's (unioned) outages from its tenant's usage",
        ("compute_facts",),
        lambda impl: hours(billed(impl, held("x", "acme", "a1", "g1", 0, 10), [outage("g1", 2, 3)]), "acme") != 9,
    ),
    Mistake(
        "drops_open_intervals",
        "a start that nothing stops is billed to the period's end (and named OPEN_AT_PERIOD_END), not dropped",
        ("compute_facts",),
        lambda impl: hours(billed(impl, [start("open", "acme", "a1", "g1", 7)]), "acme") != 3,
    ),
    Mistake(
        "counts_repeats",
        "an exact repeat of an event id is one event: de-duplicate by event_id first (the first copy in input"
        " order stands) and name the repeats DUPLICATE_EVENT",
        ("compute_facts",),
        lambda impl: (
            AnomalyKind.DUPLICATE_EVENT
            not in kinds(billed(impl, [*held("x", "acme", "a1", "g1", 1, 4), stop("x/stop", "acme", "a1", "g1", 4)]))
        ),
    ),
    Mistake(
        "no_clipping",
        "usage outside the period is not this period's: clip each paired interval to the period",
        ("compute_facts",),
        lambda impl: hours(billed(impl, held("x", "acme", "a1", "g1", -2, 3)), "acme") != 3,
    ),
    Mistake(
        "outage_credited_twice",
        "an outage reported twice is credited once: union a GPU's outages before subtracting them",
        ("compute_facts",),
        lambda impl: (
            credited_hours(
                billed(impl, held("x", "acme", "a1", "g1", 0, 10), [outage("g1", 2, 3), outage("g1", 2, 3)]), "acme"
            )
            > 1
        ),
    ),
    Mistake(
        "bills_orphan_stops",
        "a stop without a start bills nothing: name it STOP_WITHOUT_START and leave it out of the invoice",
        ("compute_facts",),
        lambda impl: hours(billed(impl, [stop("orphan", "acme", "a1", "g1", 5)]), "acme") != 0,
    ),
]


@needs("compute_facts")
@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(logs.usage_logs(), logs.price_books(), logs.outage_lists)
def test_invoices_equal_the_library_s(events: list[UsageEvent], rates: Rates, outages: list[Outage]) -> None:
    """The priced facts equal the library's invoices, anomalies and reconciliation."""
    expected = compute_invoices(events, rates, logs.PERIOD, outages, engine="reference")
    assert billed(impl, events, outages, rates, logs.PERIOD) == expected


@needs("compute_facts")
def test_a_start_and_its_stop_bill_the_time_between() -> None:
    """A start at 1 h and its stop at 4 h bill 3 h, with no anomaly."""
    run = billed(impl, held("x", "acme", "a1", "g1", 1, 4))
    assert hours(run, "acme") == 3
    assert kinds(run) == []


@needs("compute_facts")
def test_an_exact_repeat_is_one_event() -> None:
    """A stop sent twice bills the 3 h once and is named DUPLICATE_EVENT."""
    run = billed(impl, [*held("x", "acme", "a1", "g1", 1, 4), stop("x/stop", "acme", "a1", "g1", 4)])
    assert hours(run, "acme") == 3
    assert kinds(run) == [AnomalyKind.DUPLICATE_EVENT]


@needs("compute_facts")
def test_a_stop_without_a_start_bills_nothing_and_is_named() -> None:
    """A lone stop bills nothing and is named STOP_WITHOUT_START."""
    run = billed(impl, [stop("orphan", "acme", "a1", "g1", 5)])
    assert hours(run, "acme") == 0
    assert kinds(run) == [AnomalyKind.STOP_WITHOUT_START]


@needs("compute_facts")
def test_a_start_open_at_the_period_end_bills_to_the_end() -> None:
    """A start at 7 h of a ten-hour period, never stopped, bills 3 h and is named OPEN_AT_PERIOD_END."""
    run = billed(impl, [start("open", "acme", "a1", "g1", 7)])
    assert hours(run, "acme") == 3
    assert kinds(run) == [AnomalyKind.OPEN_AT_PERIOD_END]


@needs("compute_facts")
def test_usage_is_clipped_to_the_period() -> None:
    """Usage from 2 h before the period to 3 h into it bills 3 h."""
    assert hours(billed(impl, held("x", "acme", "a1", "g1", -2, 3)), "acme") == 3


@needs("compute_facts")
def test_an_outage_reported_twice_is_credited_once() -> None:
    """Ten hours of usage and the outage [2 h, 3 h) reported twice credit 1 h and bill 9 h."""
    run = billed(impl, held("x", "acme", "a1", "g1", 0, 10), [outage("g1", 2, 3), outage("g1", 2, 3)])
    assert credited_hours(run, "acme") == 1
    assert hours(run, "acme") == 9


@needs("compute_facts")
def test_overlapping_intervals_of_one_tenant_count_once() -> None:
    """Usage [0 h, 6 h) and [2 h, 8 h) of one tenant on one GPU bill 8 h, named SAME_TENANT_OVERLAP."""
    run = billed(impl, [*held("x", "acme", "a1", "g1", 0, 6), *held("y", "acme", "a2", "g1", 2, 8)])
    assert hours(run, "acme") == 8
    assert kinds(run) == [AnomalyKind.SAME_TENANT_OVERLAP]

"""The DuckDB engine equals the pure-Python reference on random logs, and both reconcile."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from hypothesis import HealthCheck, given, settings

from accounting import AnomalyKind, Outage, Period, Rates, UsageEvent, compute_invoices
from accounting.packing import PackedKey
from tests.accounting.helpers import PERIOD as HOURS
from tests.accounting.helpers import RATES, REFERENCE, compute, held
from tests.accounting.logs import PERIOD, outage_lists, price_books, usage_logs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(usage_logs(), price_books(), outage_lists)
def test_duckdb_equals_reference(events: list[UsageEvent], rates: Rates, outages: list[Outage]) -> None:
    """Same invoices, anomalies and reconciliation, to the microsecond and the cent."""
    reference = compute(REFERENCE, events, rates, PERIOD, outages)
    duckdb = compute_invoices(events, rates, PERIOD, outages, engine="duckdb")
    assert duckdb == reference


@settings(max_examples=100, deadline=None)
@given(usage_logs(), price_books(), outage_lists)
def test_every_event_and_second_is_accounted_for(events: list[UsageEvent], rates: Rates, outages: list[Outage]) -> None:
    """The reconciliation identities hold, and every event kept out of billing is named."""
    run = compute(REFERENCE, events, rates, PERIOD, outages)
    rec = run.reconciliation
    assert rec.imbalances() == []
    assert rec.events_in == len(events)
    # Each event kept out of billing is named by an anomaly of the kind it is counted under.
    found = Counter(anomaly.kind for anomaly in run.anomalies)
    for kind in (AnomalyKind.DUPLICATE_START, AnomalyKind.STOP_WITHOUT_START):
        assert rec.extra.get(kind.value, 0) == found[kind]
    for kind in (AnomalyKind.ZERO_LENGTH, AnomalyKind.STOP_BEFORE_START):  # two events each
        assert rec.extra.get(kind.value, 0) == 2 * found[kind]
    for kind in (AnomalyKind.DUPLICATE_EVENT, AnomalyKind.CONFLICTING_DUPLICATE):
        assert found[kind] <= rec.extra.get(kind.value, 0)  # one anomaly per id, counting its repeats
    # Lines add up to the usage they price; committed lines are not usage.
    lines = [x for i in run.invoices for x in i.lines if x.price_class.value != "committed"]
    assert sum(x.gpu_seconds for x in lines) == rec.usage_line_seconds
    assert all(i.total == sum(x.amount for x in i.lines if x.amount is not None) for i in run.invoices)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(usage_logs(), price_books(), outage_lists)
def test_duckdb_equals_reference_over_a_period_too_long_for_64_bit_keys(
    events: list[UsageEvent], rates: Rates, outages: list[Outage]
) -> None:
    """A period 2**62 µs long leaves no bits of a BIGINT for the (tenant, GPU) number: the
    sweeps' packed keys become HUGEINTs, and nothing else may change."""
    period = Period(-(2**61), 2**61)
    assert PackedKey.fitting(2, period.start_us, period.end_us).sql_type == "HUGEINT"
    reference = compute(REFERENCE, events, rates, period, outages)
    assert compute_invoices(events, rates, period, outages, engine="duckdb") == reference


def test_concurrent_runs_share_the_database_but_not_their_tables() -> None:
    """Runs in threads each get their own connection: their temporary tables never mix."""
    logs = [
        [event for n in range(k + 1) for event in held(f"{k}-{n}", f"t{k}", f"a{n}", f"g{n}", n, n + 0.5 + k)]
        for k in range(4)
    ]
    alone = [compute_invoices(log, RATES, HOURS) for log in logs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(lambda log: compute_invoices(log, RATES, HOURS), logs * 2))
    assert together == alone * 2

"""The DuckDB engine equals the pure-Python reference on random logs, and both reconcile."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings

from accounting import AnomalyKind, Outage, Rates, UsageEvent, compute_invoices
from tests.accounting.logs import PERIOD, outage_lists, price_books, usage_logs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(usage_logs(), price_books(), outage_lists)
def test_duckdb_equals_reference(events: list[UsageEvent], rates: Rates, outages: list[Outage]) -> None:
    """Same invoices, anomalies and reconciliation, to the microsecond and the cent."""
    reference = compute_invoices(events, rates, PERIOD, outages, engine="reference")
    duckdb = compute_invoices(events, rates, PERIOD, outages, engine="duckdb")
    assert duckdb == reference


@settings(max_examples=100, deadline=None)
@given(usage_logs(), price_books(), outage_lists)
def test_every_event_and_second_is_accounted_for(events: list[UsageEvent], rates: Rates, outages: list[Outage]) -> None:
    """The reconciliation identities hold, and every event kept out of billing is named."""
    run = compute_invoices(events, rates, PERIOD, outages, engine="reference")
    rec = run.reconciliation
    assert rec.imbalances() == []
    assert rec.events_in == len(events)
    # Each event kept out of billing is named by an anomaly of the kind it is counted under.
    found = Counter(anomaly.kind for anomaly in run.anomalies)
    for kind in (AnomalyKind.DUPLICATE_START, AnomalyKind.STOP_WITHOUT_START):
        assert rec.extra.get(kind.value, 0) == found[kind]
    assert rec.extra.get(AnomalyKind.ZERO_LENGTH.value, 0) == 2 * found[AnomalyKind.ZERO_LENGTH]
    for kind in (AnomalyKind.DUPLICATE_EVENT, AnomalyKind.CONFLICTING_DUPLICATE):
        assert found[kind] <= rec.extra.get(kind.value, 0)  # one anomaly per id, counting its repeats
    # Lines add up to the usage they price; committed lines are not usage.
    lines = [x for i in run.invoices for x in i.lines if x.price_class.value != "committed"]
    assert sum(x.gpu_seconds for x in lines) == rec.usage_line_seconds
    assert all(i.total == sum(x.amount for x in i.lines if x.amount is not None) for i in run.invoices)

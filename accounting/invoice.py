"""The public entry point: a period's invoices from a usage log, a price book and outages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from accounting.model import InvoiceRun, Outage, Period, Rates, UsageEvent
from accounting.pricing import price

Engine = Literal["duckdb", "reference"]


def compute_invoices(
    events: Sequence[UsageEvent],
    rates: Rates,
    period: Period,
    outages: Iterable[Outage] = (),
    *,
    engine: Engine = "duckdb",
) -> InvoiceRun:
    """Every tenant's invoice for ``period``, with its anomalies and reconciliation.

    ``events`` is the whole log in input order (the first copy of an event id stands), including
    events before the period: a start before it opens an interval the period bills from its start.
    ``engine`` picks DuckDB (default, for large logs) or the pure-Python reference; both give
    equal results, which the tests check.
    """
    if engine == "duckdb":
        from accounting.engine import compute_facts
    elif engine == "reference":
        from accounting.reference import compute_facts
    else:
        raise ValueError(f"unknown engine {engine!r}: use 'duckdb' or 'reference'")
    return price(compute_facts(events, rates, period, tuple(outages)), rates, period)

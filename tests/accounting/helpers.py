"""Small builders for hand-written usage logs: hours from the period start, both engines."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from accounting import (
    Anomaly,
    AnomalyKind,
    Commitment,
    EventKind,
    Invoice,
    InvoiceLine,
    InvoiceRun,
    Outage,
    Period,
    PriceClass,
    Rates,
    UsageEvent,
    compute_invoices,
)
from accounting.model import datetime_to_us

HOUR_US = 3600 * 1_000_000
P0 = datetime_to_us(datetime(2025, 6, 1, tzinfo=UTC))
PERIOD = Period(P0, P0 + 10 * HOUR_US)  # ten hours: [P0, P0 + 10 h)
RATES = Rates(
    "USD",
    {
        "H100": {PriceClass.ON_DEMAND: Decimal("2.49"), PriceClass.SPOT: Decimal("1.10")},
        "T4": {PriceClass.ON_DEMAND: Decimal("0.01")},
    },
)

REFERENCE = "reference"
both_engines = pytest.mark.parametrize("engine", ["duckdb", REFERENCE])


def compute(
    engine: str, events: Sequence[UsageEvent], rates: Rates, period: Period, outages: Sequence[Outage] = ()
) -> InvoiceRun:
    """``compute_invoices`` with the engine named "duckdb" or "reference"."""
    if engine == "duckdb":
        return compute_invoices(events, rates, period, outages, engine="duckdb")
    if engine == "reference":
        return compute_invoices(events, rates, period, outages, engine="reference")
    raise ValueError(f"no engine {engine!r}")


def at(hours: float) -> int:
    """The instant ``hours`` after the period start."""
    return P0 + round(hours * HOUR_US)


def start(
    event_id: str, tenant: str, alloc: str, gpu: str, hours: float, *, model: str = "H100", spot: bool = False
) -> UsageEvent:
    klass = PriceClass.SPOT if spot else PriceClass.ON_DEMAND
    return UsageEvent(event_id, tenant, alloc, gpu, model, EventKind.START, at(hours), klass)


def stop(
    event_id: str, tenant: str, alloc: str, gpu: str, hours: float, *, model: str = "H100", spot: bool = False
) -> UsageEvent:
    klass = PriceClass.SPOT if spot else PriceClass.ON_DEMAND
    return UsageEvent(event_id, tenant, alloc, gpu, model, EventKind.STOP, at(hours), klass)


def held(
    prefix: str,
    tenant: str,
    alloc: str,
    gpu: str,
    begin: float,
    end: float,
    *,
    model: str = "H100",
    spot: bool = False,
) -> list[UsageEvent]:
    """A start at ``begin`` hours and its stop at ``end`` hours, ids ``<prefix>/start|stop``."""
    return [
        start(f"{prefix}/start", tenant, alloc, gpu, begin, model=model, spot=spot),
        stop(f"{prefix}/stop", tenant, alloc, gpu, end, model=model, spot=spot),
    ]


def outage(gpu: str, begin: float, end: float) -> Outage:
    return Outage(gpu, at(begin), at(end))


def with_commitment(tenant: str, model: str, gpus: int, rate: str) -> Rates:
    return Rates(RATES.currency, RATES.gpu_hour, (Commitment(tenant, model, gpus, Decimal(rate)),))


def run(engine: str, events: list[UsageEvent], outages: list[Outage] | None = None, rates: Rates = RATES) -> InvoiceRun:
    """Compute, and check the reconciliation identities every run must satisfy."""
    result = compute(engine, events, rates, PERIOD, outages or [])
    assert result.reconciliation.imbalances() == []
    return result


def invoice(result: InvoiceRun, tenant: str) -> Invoice:
    (found,) = [i for i in result.invoices if i.tenant_id == tenant]
    return found


def line(result: InvoiceRun, tenant: str, model: str, klass: PriceClass) -> InvoiceLine:
    (found,) = [x for x in invoice(result, tenant).lines if x.gpu_model == model and x.price_class is klass]
    return found


def anomalies(result: InvoiceRun, kind: AnomalyKind) -> list[Anomaly]:
    return [a for a in result.anomalies if a.kind is kind]


def kinds(result: InvoiceRun) -> list[AnomalyKind]:
    return [a.kind for a in result.anomalies]

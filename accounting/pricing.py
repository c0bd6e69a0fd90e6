"""Facts to invoices: the only place money is computed.

Each line's amount is ``gpu_seconds / 3600 * gpu_hour_rate``, computed exactly and rounded
half-even to cents once per line; a tenant's total is the sum of its rounded, priced lines.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

from accounting import anomalies
from accounting.facts import Facts, line_class, line_rate
from accounting.model import (
    SECONDS_PER_HOUR,
    US_PER_SECOND,
    Anomaly,
    AnomalyKind,
    Invoice,
    InvoiceLine,
    InvoiceRun,
    Period,
    PriceClass,
    Rates,
    Reconciliation,
    us_to_seconds,
)

CENT = Decimal("0.01")
_CLASS_ORDER = {klass: i for i, klass in enumerate(PriceClass)}
_KIND_ORDER = {kind: i for i, kind in enumerate(AnomalyKind)}


def amount(gpu_us: int, gpu_hour_rate: Decimal) -> Decimal:
    """``gpu_us`` microseconds at ``gpu_hour_rate`` per GPU-hour, rounded half-even to cents."""
    # 60 digits: a quotient by 3600 that is not exact is never within 1e-40 of a half cent,
    # so rounding it to 60 digits first cannot flip the half-even decision.
    with localcontext() as ctx:
        ctx.prec = 60
        exact = Decimal(gpu_us) * gpu_hour_rate / (US_PER_SECOND * SECONDS_PER_HOUR)
        return exact.quantize(CENT, rounding=ROUND_HALF_EVEN)


def anomaly_order(anomaly: Anomaly) -> tuple[int, str, str, str, tuple[str, ...], str]:
    """A total order on anomalies, so both engines list them identically."""
    return (
        _KIND_ORDER[anomaly.kind],
        anomaly.tenant_id or "",
        anomaly.gpu_uuid or "",
        anomaly.allocation_id or "",
        anomaly.event_ids,
        anomaly.detail,
    )


def price(facts: Facts, rates: Rates, period: Period) -> InvoiceRun:
    """The invoice run the facts and the price book make."""
    lines: dict[str, list[InvoiceLine]] = defaultdict(list)
    found = list(facts.anomalies)
    period_us = period.end_us - period.start_us
    usage_line_us = unpriced_us = covered_us = 0

    def add_usage_line(tenant_id: str, gpu_model: str, klass: PriceClass, gpu_us: int) -> None:
        nonlocal usage_line_us, unpriced_us
        rate = line_rate(rates, gpu_model, klass)
        lines[tenant_id].append(
            InvoiceLine(gpu_model, klass, us_to_seconds(gpu_us), rate, None if rate is None else amount(gpu_us, rate))
        )
        usage_line_us += gpu_us
        if rate is None:
            unpriced_us += gpu_us
            event_ids = facts.unpriced_event_ids.get((tenant_id, gpu_model, klass), ())
            found.append(anomalies.unpriced_interval(tenant_id, gpu_model, klass, event_ids, gpu_us))

    for (tenant_id, gpu_model, usage_class), gpu_us in facts.usage_us.items():
        klass = line_class(rates, tenant_id, gpu_model, usage_class)
        if klass is not PriceClass.OVERAGE:  # overage lines come with their commitment below
            add_usage_line(tenant_id, gpu_model, klass, gpu_us)

    for commitment in rates.commitments:
        tenant_id, gpu_model = commitment.tenant_id, commitment.gpu_model
        committed_us = commitment.gpus * period_us
        lines[tenant_id].append(
            InvoiceLine(
                gpu_model,
                PriceClass.COMMITTED,
                us_to_seconds(committed_us),
                commitment.gpu_hour,
                amount(committed_us, commitment.gpu_hour),
            )
        )
        overage_us = facts.overage_us.get((tenant_id, gpu_model), 0)
        covered_us += facts.usage_us.get((tenant_id, gpu_model, PriceClass.ON_DEMAND), 0) - overage_us
        if overage_us > 0:
            add_usage_line(tenant_id, gpu_model, PriceClass.OVERAGE, overage_us)

    invoices = []
    for tenant_id in sorted(lines):
        ordered = tuple(sorted(lines[tenant_id], key=lambda line: (line.gpu_model, _CLASS_ORDER[line.price_class])))
        total = sum((line.amount for line in ordered if line.amount is not None), Decimal("0.00"))
        credited = us_to_seconds(facts.credited_us.get(tenant_id, 0))
        invoices.append(Invoice(tenant_id, ordered, credited, total))

    credited_us = sum(facts.credited_us.values())
    usage_us = sum(facts.usage_us.values())
    reconciliation = Reconciliation(
        events_in=facts.events_in,
        events_billed=facts.events_billed,
        events_in_anomalies=sum(facts.events_in_anomalies.values()),
        events_outside_period=facts.events_outside_period,
        extra={kind.value: count for kind, count in sorted(facts.events_in_anomalies.items()) if count},
        interval_seconds=us_to_seconds(facts.interval_us),
        same_tenant_overlap_seconds=us_to_seconds(facts.same_tenant_overlap_us),
        credited_seconds=us_to_seconds(credited_us),
        usage_seconds=us_to_seconds(usage_us),
        committed_covered_seconds=us_to_seconds(covered_us),
        usage_line_seconds=us_to_seconds(usage_line_us),
        unpriced_seconds=us_to_seconds(unpriced_us),
        cross_tenant_overlap_seconds=us_to_seconds(facts.cross_tenant_overlap_us),
    )
    return InvoiceRun(
        period=period,
        currency=rates.currency,
        invoices=tuple(invoices),
        anomalies=tuple(sorted(found, key=anomaly_order)),
        reconciliation=reconciliation,
    )

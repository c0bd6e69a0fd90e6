"""What an engine computes from a log: integer microseconds and anomalies, no money.

Both engines (DuckDB and the pure-Python reference) produce :class:`Facts`; one pricing step
(``accounting.pricing``) turns them into an :class:`~accounting.model.InvoiceRun`. Sharing
everything after the facts means the engines can only disagree about the facts, and the tests
compare exactly those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from accounting.model import Anomaly, AnomalyKind, PriceClass, Rates, UsageEvent

UsageKey = tuple[str, str, PriceClass]
"""(tenant_id, gpu_model, price class of the usage: ON_DEMAND or SPOT)."""

LineKey = tuple[str, str, PriceClass]
"""(tenant_id, gpu_model, price class of the invoice line: ON_DEMAND, SPOT or OVERAGE)."""

PAYLOAD_FIELDS = ("tenant_id", "allocation_id", "gpu_uuid", "gpu_model", "kind", "at_us", "price_class")
"""What two copies of one event_id must agree on to be the same event. Bit i of a difference
mask stands for field i (the SQL engine computes masks, the reference names fields)."""


@dataclass(frozen=True)
class Facts:
    """Everything billing needs from one engine run, in microseconds."""

    # (tenant, model, ON_DEMAND|SPOT) -> time to bill after union, on-demand precedence and
    # outage credits. A key exists exactly when that group has an interval in the period.
    usage_us: Mapping[UsageKey, int]
    # Every commitment's (tenant, model) -> the integral of max(0, n(t) - committed GPUs).
    overage_us: Mapping[tuple[str, str], int]
    # tenant -> usage that fell inside outages (tenants with an interval in the period).
    credited_us: Mapping[str, int]
    # Event ids of the intervals behind each line that has no rate (see unpriced_usage()).
    unpriced_event_ids: Mapping[LineKey, tuple[str, ...]]
    # Every anomaly except UNPRICED_INTERVAL, which pricing adds.
    anomalies: tuple[Anomaly, ...]
    events_in: int
    events_billed: int
    events_outside_period: int
    # Events kept out of billing, by the anomaly that names them.
    events_in_anomalies: Mapping[AnomalyKind, int]
    interval_us: int
    same_tenant_overlap_us: int
    cross_tenant_overlap_us: int


def line_class(rates: Rates, tenant_id: str, gpu_model: str, usage_class: PriceClass) -> PriceClass:
    """The line a usage group is billed on: on-demand usage under a commitment is overage."""
    if usage_class is PriceClass.ON_DEMAND and rates.commitment(tenant_id, gpu_model) is not None:
        return PriceClass.OVERAGE
    return usage_class


def line_rate(rates: Rates, gpu_model: str, klass: PriceClass) -> Decimal | None:
    """The rate of a usage line: overage is priced at the model's on-demand rate."""
    return rates.rate(gpu_model, PriceClass.ON_DEMAND if klass is PriceClass.OVERAGE else klass)


def unpriced_usage(
    rates: Rates, usage_keys: Iterable[UsageKey], overage_us: Mapping[tuple[str, str], int]
) -> dict[UsageKey, LineKey]:
    """The usage groups whose line will have no rate, mapped to that line.

    An overage line exists only when there is overage, so a commitment on a model with no
    on-demand rate is unpriced only when it is exceeded.
    """
    found: dict[UsageKey, LineKey] = {}
    for tenant_id, gpu_model, usage_class in usage_keys:
        klass = line_class(rates, tenant_id, gpu_model, usage_class)
        if klass is PriceClass.OVERAGE and overage_us.get((tenant_id, gpu_model), 0) == 0:
            continue
        if line_rate(rates, gpu_model, klass) is None:
            found[(tenant_id, gpu_model, usage_class)] = (tenant_id, gpu_model, klass)
    return found


def differing_fields(first: UsageEvent, other: UsageEvent) -> int:
    """The difference mask of two copies of one event id (0: the same payload)."""
    mask = 0
    for bit, name in enumerate(PAYLOAD_FIELDS):
        if getattr(first, name) != getattr(other, name):
            mask |= 1 << bit
    return mask


def field_names(mask: int) -> tuple[str, ...]:
    """The payload fields a difference mask stands for, in PAYLOAD_FIELDS order."""
    return tuple(name for bit, name in enumerate(PAYLOAD_FIELDS) if mask & (1 << bit))

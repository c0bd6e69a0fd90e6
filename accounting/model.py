"""The nouns of billing: usage events, rates, outages, and the invoices computed from them.

This module is the contract between the loaders (JSONL files, the control plane's event
table), the engines (DuckDB, and the pure-Python reference) and the renderers (CLI tables,
JSON, the BillingService). It holds data only; the rules live in the engines.

Times are integer microseconds since the Unix epoch, UTC (``*_us``): exact, cheap to sort,
and what the control plane stores. Money and GPU-seconds are ``Decimal``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum

US_PER_SECOND = 1_000_000
SECONDS_PER_HOUR = 3600


class EventKind(StrEnum):
    START = "start"
    STOP = "stop"


class PriceClass(StrEnum):
    """How a line is priced. Events carry ``on_demand`` or ``spot``; the engine adds the rest."""

    ON_DEMAND = "on_demand"
    SPOT = "spot"
    COMMITTED = "committed"
    OVERAGE = "overage"


class AnomalyKind(StrEnum):
    """Every way an event can fail to pair cleanly. Each one is reported, never dropped."""

    DUPLICATE_EVENT = "DUPLICATE_EVENT"
    CONFLICTING_DUPLICATE = "CONFLICTING_DUPLICATE"
    DUPLICATE_START = "DUPLICATE_START"
    STOP_WITHOUT_START = "STOP_WITHOUT_START"
    OPEN_AT_PERIOD_END = "OPEN_AT_PERIOD_END"
    ZERO_LENGTH = "ZERO_LENGTH"
    SAME_TENANT_OVERLAP = "SAME_TENANT_OVERLAP"
    CROSS_TENANT_OVERLAP = "CROSS_TENANT_OVERLAP"
    UNPRICED_INTERVAL = "UNPRICED_INTERVAL"


@dataclass(frozen=True)
class UsageEvent:
    """A GPU handed to (``start``) or taken back from (``stop``) a tenant's allocation."""

    event_id: str
    tenant_id: str
    allocation_id: str
    gpu_uuid: str
    gpu_model: str
    kind: EventKind
    at_us: int
    price_class: PriceClass = PriceClass.ON_DEMAND


@dataclass(frozen=True)
class Outage:
    """A GPU out of service over ``[start_us, end_us)``: usage inside it is credited."""

    gpu_uuid: str
    start_us: int
    end_us: int


@dataclass(frozen=True)
class Commitment:
    """``gpus`` GPUs of ``gpu_model`` paid for at ``gpu_hour`` for the whole period, used or not."""

    tenant_id: str
    gpu_model: str
    gpus: int
    gpu_hour: Decimal


@dataclass(frozen=True)
class Rates:
    """Per-GPU-hour prices by model and price class, plus commitments."""

    currency: str
    gpu_hour: dict[str, dict[PriceClass, Decimal]]
    commitments: tuple[Commitment, ...] = ()

    def rate(self, gpu_model: str, price_class: PriceClass) -> Decimal | None:
        return self.gpu_hour.get(gpu_model, {}).get(price_class)


@dataclass(frozen=True)
class Period:
    """The half-open billing period ``[start_us, end_us)``."""

    start_us: int
    end_us: int

    def __post_init__(self) -> None:
        if self.end_us <= self.start_us:
            raise ValueError(f"period end {self.end_us} is not after its start {self.start_us}")

    @property
    def seconds(self) -> Decimal:
        return us_to_seconds(self.end_us - self.start_us)


@dataclass(frozen=True)
class InvoiceLine:
    """One priced line. ``amount`` is None when no rate exists (the total excludes it)."""

    gpu_model: str
    price_class: PriceClass
    gpu_seconds: Decimal
    gpu_hour_rate: Decimal | None
    amount: Decimal | None


@dataclass(frozen=True)
class Invoice:
    tenant_id: str
    lines: tuple[InvoiceLine, ...]
    credited_gpu_seconds: Decimal
    total: Decimal


@dataclass(frozen=True)
class Anomaly:
    """An event, or a stretch of time, that did not pair cleanly, with the evidence."""

    kind: AnomalyKind
    tenant_id: str | None
    gpu_uuid: str | None
    allocation_id: str | None
    event_ids: tuple[str, ...]
    seconds: Decimal
    detail: str


@dataclass(frozen=True)
class Reconciliation:
    """Where every input event went: each one is billed or named in an anomaly."""

    events_in: int
    events_billed: int
    events_in_anomalies: int
    events_outside_period: int
    extra: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class InvoiceRun:
    period: Period
    currency: str
    invoices: tuple[Invoice, ...]
    anomalies: tuple[Anomaly, ...]
    reconciliation: Reconciliation


def us_to_seconds(us: int) -> Decimal:
    """Exact seconds for a microsecond count."""
    return Decimal(us).scaleb(-6)


def datetime_to_us(moment: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (naive ones are refused: whose zone?)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"timestamp {moment.isoformat()} has no time zone")
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * US_PER_SECOND + delta.microseconds


def us_to_datetime(us: int) -> datetime:
    return datetime.fromtimestamp(us // US_PER_SECOND, tz=UTC).replace(microsecond=us % US_PER_SECOND)

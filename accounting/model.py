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
# A fraction of a GPU is counted in thousandths (Rates.rate).
MILLI_PER_GPU = 1000


class EventKind(StrEnum):
    """Whether the event hands a GPU to a tenant or takes it back."""

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
    STOP_BEFORE_START = "STOP_BEFORE_START"
    OPEN_AT_PERIOD_END = "OPEN_AT_PERIOD_END"
    ZERO_LENGTH = "ZERO_LENGTH"
    SAME_TENANT_OVERLAP = "SAME_TENANT_OVERLAP"
    CROSS_TENANT_OVERLAP = "CROSS_TENANT_OVERLAP"
    UNPRICED_INTERVAL = "UNPRICED_INTERVAL"


@dataclass(frozen=True, slots=True)
class UsageEvent:
    """A GPU handed to (``start``) or taken back from (``stop``) a tenant's allocation."""

    # Slotted: a month of a fleet is millions of events; without an instance dict each is
    # smaller and its fields are quicker to read (engine.events_to_arrow reads them all).

    event_id: str
    tenant_id: str
    allocation_id: str
    gpu_uuid: str
    gpu_model: str
    kind: EventKind
    at_us: int
    price_class: PriceClass = PriceClass.ON_DEMAND


@dataclass(frozen=True, slots=True)
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

    def __post_init__(self) -> None:
        seen: set[tuple[str, str]] = set()
        for commitment in self.commitments:
            key = (commitment.tenant_id, commitment.gpu_model)
            if key in seen:
                raise ValueError(f"two commitments for tenant {key[0]!r} on {key[1]!r}; merge them into one")
            if commitment.gpus <= 0:
                raise ValueError(f"commitment of tenant {key[0]!r} on {key[1]!r} must cover at least one GPU")
            seen.add(key)

    def rate(self, gpu_model: str, price_class: PriceClass) -> Decimal | None:
        """The per-GPU-hour price, or None when the price book has none (the line is unpriced).

        A fraction of a GPU (a MIG slice or a soft share) is billed as a unit of its own,
        ``<model>/<thousandths>`` (``H100/500``: half an H100), at that fraction of the model's
        rate unless the price book names the unit itself."""
        named = self.gpu_hour.get(gpu_model, {}).get(price_class)
        base, milli = split_unit(gpu_model)
        if named is not None or milli == MILLI_PER_GPU:
            return named
        whole = self.gpu_hour.get(base, {}).get(price_class)
        return None if whole is None else whole * milli / MILLI_PER_GPU

    def commitment(self, tenant_id: str, gpu_model: str) -> Commitment | None:
        """The tenant's commitment on this model, if it has one (at most one per pair)."""
        for commitment in self.commitments:
            if commitment.tenant_id == tenant_id and commitment.gpu_model == gpu_model:
                return commitment
        return None


def split_unit(gpu_model: str) -> tuple[str, int]:
    """A billed unit's GPU model and the thousandths of one GPU it is: ``H100/500`` is
    ("H100", 500), a whole GPU's ``H100`` ("H100", 1000). A name that is not a fraction of
    the form (thousandths 1-999) is a model of its own."""
    base, slash, milli = gpu_model.partition("/")
    if slash and milli.isdigit() and 0 < int(milli) < MILLI_PER_GPU:
        return base, int(milli)
    return gpu_model, MILLI_PER_GPU


@dataclass(frozen=True)
class Period:
    """The half-open billing period ``[start_us, end_us)``."""

    start_us: int
    end_us: int

    def __post_init__(self) -> None:
        if self.end_us <= self.start_us:
            raise ValueError(f"period end {rfc3339(self.end_us)} is not after its start {rfc3339(self.start_us)}")

    @property
    def seconds(self) -> Decimal:
        """The period's length in seconds, exact."""
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
    """One tenant's bill for the period: its lines, what outages credited, and the priced total."""

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
    # CROSS_TENANT_OVERLAP only: who else held the GPU. Kept out of ``detail`` so a service
    # that shows a tenant its own anomalies can drop other tenants' names in one place.
    other_tenant_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reconciliation:
    """Where every input event, and every second of usage, went.

    Each input event has exactly one fate: ``billed`` (it bounds an interval that falls in the
    period, whose time is billed, de-duplicated or credited), named in an anomaly that keeps it
    out of billing (``extra`` counts them by anomaly kind), or outside the period. Each
    second of the clipped intervals is billed once, de-duplicated as a same-tenant overlap, or
    credited for an outage. :meth:`imbalances` checks both identities.
    """

    events_in: int
    events_billed: int
    events_in_anomalies: int
    events_outside_period: int
    # events_in_anomalies by AnomalyKind value (DUPLICATE_EVENT, STOP_WITHOUT_START, ...).
    extra: dict[str, int] = field(default_factory=dict)
    # Sum of the lengths of every interval clipped to the period, overlaps counted each time.
    interval_seconds: Decimal = Decimal(0)
    # What counting overlapping intervals of one tenant on one GPU once removes.
    same_tenant_overlap_seconds: Decimal = Decimal(0)
    # Usage that fell inside an outage of its GPU.
    credited_seconds: Decimal = Decimal(0)
    # What is left to bill: interval - same-tenant overlap - credited.
    usage_seconds: Decimal = Decimal(0)
    # Usage that commitments cover (paid by the committed lines), the rest is on lines below.
    committed_covered_seconds: Decimal = Decimal(0)
    # gpu_seconds of the on_demand, spot and overage lines, priced or not.
    usage_line_seconds: Decimal = Decimal(0)
    # Of those, the seconds on lines with no rate (their amount is null).
    unpriced_seconds: Decimal = Decimal(0)
    # Time tenants shared a GPU with another tenant (each is still billed its own time).
    cross_tenant_overlap_seconds: Decimal = Decimal(0)

    def imbalances(self) -> list[str]:
        """The identities that do not hold; empty when every event and second is accounted for."""
        problems = []
        if self.events_in != self.events_billed + self.events_in_anomalies + self.events_outside_period:
            problems.append("events_in != events_billed + events_in_anomalies + events_outside_period")
        if self.events_in_anomalies != sum(self.extra.values()):
            problems.append("events_in_anomalies != sum of events by anomaly kind")
        accounted = self.usage_seconds + self.same_tenant_overlap_seconds + self.credited_seconds
        if self.interval_seconds != accounted:
            problems.append("interval_seconds != usage + same_tenant_overlap + credited seconds")
        if self.usage_seconds != self.usage_line_seconds + self.committed_covered_seconds:
            problems.append("usage_seconds != usage_line_seconds + committed_covered_seconds")
        return problems


@dataclass(frozen=True)
class InvoiceRun:
    """Every tenant's invoice for one period, the anomalies found on the way, and where each event went."""

    period: Period
    currency: str
    invoices: tuple[Invoice, ...]
    anomalies: tuple[Anomaly, ...]
    reconciliation: Reconciliation


def us_to_seconds(us: int) -> Decimal:
    """Exact seconds for a microsecond count (``3600`` rather than ``3600.000000``)."""
    # Division by a power of ten is exact here and keeps the shortest form, which prints well.
    return Decimal(us) / Decimal(US_PER_SECOND)


def datetime_to_us(moment: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (naive ones are refused: whose zone?)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"timestamp {moment.isoformat()} has no time zone")
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * US_PER_SECOND + delta.microseconds


def us_to_datetime(us: int) -> datetime:
    """The aware UTC datetime of a microsecond timestamp."""
    return datetime.fromtimestamp(us // US_PER_SECOND, tz=UTC).replace(microsecond=us % US_PER_SECOND)


def rfc3339(us: int) -> str:
    """``2025-06-01T00:00:00Z``, with microseconds only when there are some."""
    moment = us_to_datetime(us)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}"
    return text + "Z"

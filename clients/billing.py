"""Billing objects returned by the client (invoices, usage events) and their conversion from
protobuf. Plain dataclasses: money and GPU-seconds are ``Decimal``, exact as the server sent
them; enumerations are strings without their proto prefix (``"H100"``, ``"ON_DEMAND"``,
``"START"``); times are aware UTC datetimes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from clients.convert import enum_label, enum_name, optional_time
from gpucloud.v1 import billing_pb2


@dataclass(frozen=True)
class InvoiceLine:
    """One priced line of the period's own usage: the seconds of one billed unit and price
    class. The unit is a GPU model (``H100``), or a fraction of one for MIG slices and soft
    shares (``H100/500``: half an H100, ``gpu_milli`` 500), priced at that fraction of the rate."""

    gpu_model: str
    price_class: str
    gpu_seconds: Decimal
    # None when the rate card has no price for the line: it is excluded from the totals.
    gpu_hour_rate: Decimal | None
    amount: Decimal | None
    gpu_milli: int = 1000


@dataclass(frozen=True)
class InvoiceAdjustment:
    """A signed correction of an earlier, finalized period carried by this invoice."""

    adjusted_period: str
    gpu_model: str
    price_class: str
    gpu_seconds: Decimal
    amount: Decimal | None
    gpu_milli: int = 1000


@dataclass(frozen=True)
class InvoiceAnomaly:
    """An event, or a stretch of GPU time, that did not pair cleanly (``kind`` such as ``DUPLICATE_START``):
    reported, never dropped."""

    kind: str
    gpu_uuid: str | None
    allocation_id: str | None
    event_ids: tuple[str, ...]
    seconds: Decimal
    detail: str


@dataclass(frozen=True)
class InvoiceReconciliation:
    """Where every input event and every second of usage went. Two identities hold: ``events_in`` = billed + in
    anomalies + outside the period, and ``interval_seconds`` = usage + same-tenant overlap + credited; ``extra``
    counts the events in anomalies by anomaly kind."""

    events_in: int
    events_billed: int
    events_in_anomalies: int
    events_outside_period: int
    extra: dict[str, int]
    interval_seconds: Decimal
    same_tenant_overlap_seconds: Decimal
    credited_seconds: Decimal
    usage_seconds: Decimal
    committed_covered_seconds: Decimal
    usage_line_seconds: Decimal
    unpriced_seconds: Decimal
    cross_tenant_overlap_seconds: Decimal


@dataclass(frozen=True)
class Invoice:
    """A tenant's invoice for one period (``YYYY-MM``, UTC)."""

    tenant_id: str
    period: str
    start_time: datetime | None
    end_time: datetime | None
    currency: str
    lines: tuple[InvoiceLine, ...]
    credited_gpu_seconds: Decimal
    subtotal: Decimal
    adjustments: tuple[InvoiceAdjustment, ...]
    adjustments_total: Decimal
    total: Decimal
    anomalies: tuple[InvoiceAnomaly, ...]
    reconciliation: InvoiceReconciliation
    finalized: bool
    finalize_time: datetime | None
    events_watermark_time: datetime | None


@dataclass(frozen=True)
class FinalizedInvoice:
    """The result of a finalize: the frozen invoice, and whether this call froze it."""

    invoice: Invoice
    newly_finalized: bool


@dataclass(frozen=True)
class UsageEvent:
    """One record of the billing outbox: a GPU handed to (START) or taken from (STOP) a tenant."""

    event_id: str
    tenant_id: str
    allocation_id: str
    node_id: str
    gpu_uuid: str
    gpu_model: str
    kind: str
    price_class: str
    event_time: datetime | None
    record_time: datetime | None
    source: str
    # The thousandths of a GPU the billed unit is (``gpu_model`` names the fraction: ``H100/500``).
    gpu_milli: int = 1000


WHOLE_GPU = 1000


def _unit(model: int, milli: int) -> str:
    """A billed unit's name as the offline engine writes it: the model, with ``/<thousandths>``
    for a fraction of a GPU (0, from a server before fractions, and 1000 are whole GPUs)."""
    name = _gpu_model(model)
    return name if milli in (0, WHOLE_GPU) else f"{name}/{milli}"


def _decimal(text: str) -> Decimal:
    return Decimal(text) if text else Decimal(0)


def _maybe_decimal(text: str) -> Decimal | None:
    return Decimal(text) if text else None


def _price_class(number: int) -> str:
    return enum_label(billing_pb2.PriceClass.DESCRIPTOR, "PRICE_CLASS_", number)


def _gpu_model(number: int) -> str:
    return enum_name("GpuModel", "GPU_MODEL_", number)


def invoice(message: billing_pb2.Invoice) -> Invoice:
    """The client's ``Invoice`` of an Invoice message; an unpriced (empty) rate or amount reads None."""
    rec = message.reconciliation
    return Invoice(
        tenant_id=message.tenant_id,
        period=message.period,
        start_time=optional_time(message, "start_time"),
        end_time=optional_time(message, "end_time"),
        currency=message.currency,
        lines=tuple(
            InvoiceLine(
                gpu_model=_unit(line.gpu_model, line.gpu_milli),
                price_class=_price_class(line.price_class),
                gpu_seconds=_decimal(line.gpu_seconds),
                gpu_hour_rate=_maybe_decimal(line.gpu_hour_rate),
                amount=_maybe_decimal(line.amount),
                gpu_milli=line.gpu_milli or WHOLE_GPU,
            )
            for line in message.lines
        ),
        credited_gpu_seconds=_decimal(message.credited_gpu_seconds),
        subtotal=_decimal(message.subtotal),
        adjustments=tuple(
            InvoiceAdjustment(
                adjusted_period=a.adjusted_period,
                gpu_model=_unit(a.gpu_model, a.gpu_milli),
                price_class=_price_class(a.price_class),
                gpu_seconds=_decimal(a.gpu_seconds),
                amount=_maybe_decimal(a.amount),
                gpu_milli=a.gpu_milli or WHOLE_GPU,
            )
            for a in message.adjustments
        ),
        adjustments_total=_decimal(message.adjustments_total),
        total=_decimal(message.total),
        anomalies=tuple(
            InvoiceAnomaly(
                kind=a.kind,
                gpu_uuid=a.gpu_uuid or None,
                allocation_id=a.allocation_id or None,
                event_ids=tuple(a.event_ids),
                seconds=_decimal(a.seconds),
                detail=a.detail,
            )
            for a in message.anomalies
        ),
        reconciliation=InvoiceReconciliation(
            events_in=rec.events_in,
            events_billed=rec.events_billed,
            events_in_anomalies=rec.events_in_anomalies,
            events_outside_period=rec.events_outside_period,
            extra=dict(rec.extra),
            interval_seconds=_decimal(rec.interval_seconds),
            same_tenant_overlap_seconds=_decimal(rec.same_tenant_overlap_seconds),
            credited_seconds=_decimal(rec.credited_seconds),
            usage_seconds=_decimal(rec.usage_seconds),
            committed_covered_seconds=_decimal(rec.committed_covered_seconds),
            usage_line_seconds=_decimal(rec.usage_line_seconds),
            unpriced_seconds=_decimal(rec.unpriced_seconds),
            cross_tenant_overlap_seconds=_decimal(rec.cross_tenant_overlap_seconds),
        ),
        finalized=message.finalized,
        finalize_time=optional_time(message, "finalize_time"),
        events_watermark_time=optional_time(message, "events_watermark_time"),
    )


def usage_event(message: billing_pb2.UsageEvent) -> UsageEvent:
    """The client's ``UsageEvent`` of a UsageEvent message."""
    return UsageEvent(
        event_id=message.event_id,
        tenant_id=message.tenant_id,
        allocation_id=message.allocation_id,
        node_id=message.node_id,
        gpu_uuid=message.gpu_uuid,
        gpu_model=_unit(message.gpu_model, message.gpu_milli),
        kind=enum_label(billing_pb2.UsageEventKind.DESCRIPTOR, "USAGE_EVENT_KIND_", message.kind),
        price_class=_price_class(message.price_class),
        event_time=optional_time(message, "event_time"),
        record_time=optional_time(message, "record_time"),
        source=message.source,
        gpu_milli=message.gpu_milli or WHOLE_GPU,
    )

"""The protobuf forms of invoices and usage events (translation only, no rules)."""

from __future__ import annotations

from decimal import Decimal

from accounting import PriceClass, split_unit
from gpucloud.v1 import billing_pb2, node_pb2
from services.billing.invoice import LATE_AFTER_FINALIZATION, InvoiceView
from services.billing.repository import StoredEvent
from services.nodes.inventory import GpuModel
from services.nodes.proto import GPU_MODEL_TO_PROTO
from services.timestamps import timestamp

PRICE_CLASS_TO_PROTO = {c: billing_pb2.PriceClass.Value(f"PRICE_CLASS_{c.name}") for c in PriceClass}
_KIND_TO_PROTO = {"start": billing_pb2.USAGE_EVENT_KIND_START, "stop": billing_pb2.USAGE_EVENT_KIND_STOP}


def decimal_text(value: Decimal | None) -> str:
    """Plain positional notation (``0.000000``, never ``0E-6``); empty for None."""
    return "" if value is None else f"{value:f}"


def gpu_model(name: str) -> node_pb2.GpuModel.ValueType:
    """A billed unit's model (``H100/500``: H100) as the enum; a name this server does not
    know reads UNSPECIFIED."""
    try:
        return GPU_MODEL_TO_PROTO[GpuModel(split_unit(name)[0])]
    except ValueError:
        return node_pb2.GPU_MODEL_UNSPECIFIED


def gpu_milli(name: str) -> int:
    """The thousandths of one GPU a billed unit is (accounting.split_unit)."""
    return split_unit(name)[1]


def invoice_to_proto(view: InvoiceView) -> billing_pb2.Invoice:
    """The API form of an invoice; its late events become LATE_AFTER_FINALIZATION anomalies."""
    anomalies = [
        billing_pb2.InvoiceAnomaly(
            kind=a.kind.value,
            gpu_uuid=a.gpu_uuid or "",
            allocation_id=a.allocation_id or "",
            event_ids=list(a.event_ids),
            seconds=decimal_text(a.seconds),
            detail=a.detail,
        )
        for a in view.anomalies
    ]
    anomalies += [
        billing_pb2.InvoiceAnomaly(
            kind=LATE_AFTER_FINALIZATION,
            event_ids=list(late.event_ids),
            seconds=decimal_text(late.gpu_seconds),
            detail=late.detail,
        )
        for late in view.late_events
    ]
    rec = view.reconciliation
    return billing_pb2.Invoice(
        tenant_id=view.tenant_id,
        period=view.period.name,
        start_time=timestamp(view.period.start_us),
        end_time=timestamp(view.period.end_us),
        currency=view.currency,
        lines=[
            billing_pb2.InvoiceLine(
                gpu_model=gpu_model(line.gpu_model),
                gpu_milli=gpu_milli(line.gpu_model),
                price_class=PRICE_CLASS_TO_PROTO[line.price_class],
                gpu_seconds=decimal_text(line.gpu_seconds),
                gpu_hour_rate=decimal_text(line.gpu_hour_rate),
                amount=decimal_text(line.amount),
            )
            for line in view.lines
        ],
        credited_gpu_seconds=decimal_text(view.credited_gpu_seconds),
        subtotal=decimal_text(view.subtotal),
        adjustments=[
            billing_pb2.InvoiceAdjustment(
                adjusted_period=a.adjusted_period,
                gpu_model=gpu_model(a.gpu_model),
                gpu_milli=gpu_milli(a.gpu_model),
                price_class=PRICE_CLASS_TO_PROTO[a.price_class],
                gpu_seconds=decimal_text(a.gpu_seconds),
                amount=decimal_text(a.amount),
            )
            for a in view.adjustments
        ],
        adjustments_total=decimal_text(view.adjustments_total),
        total=decimal_text(view.total),
        anomalies=anomalies,
        reconciliation=billing_pb2.InvoiceReconciliation(
            events_in=rec.events_in,
            events_billed=rec.events_billed,
            events_in_anomalies=rec.events_in_anomalies,
            events_outside_period=rec.events_outside_period,
            extra=dict(rec.extra),
            interval_seconds=decimal_text(rec.interval_seconds),
            same_tenant_overlap_seconds=decimal_text(rec.same_tenant_overlap_seconds),
            credited_seconds=decimal_text(rec.credited_seconds),
            usage_seconds=decimal_text(rec.usage_seconds),
            committed_covered_seconds=decimal_text(rec.committed_covered_seconds),
            usage_line_seconds=decimal_text(rec.usage_line_seconds),
            unpriced_seconds=decimal_text(rec.unpriced_seconds),
            cross_tenant_overlap_seconds=decimal_text(rec.cross_tenant_overlap_seconds),
        ),
        finalized=view.finalized,
        finalize_time=timestamp(view.finalized_us),
        events_watermark_time=timestamp(view.watermark_us),
    )


def usage_event_to_proto(stored: StoredEvent) -> billing_pb2.UsageEvent:
    """The API form of a stored usage event."""
    event = stored.logged.event
    return billing_pb2.UsageEvent(
        event_id=event.event_id,
        tenant_id=event.tenant_id,
        allocation_id=event.allocation_id,
        node_id=stored.node_id,
        gpu_uuid=event.gpu_uuid,
        gpu_model=gpu_model(event.gpu_model),
        gpu_milli=gpu_milli(event.gpu_model),
        kind=_KIND_TO_PROTO[event.kind.value],
        price_class=PRICE_CLASS_TO_PROTO[event.price_class],
        event_time=timestamp(event.at_us),
        record_time=timestamp(stored.logged.recorded_us),
        source=stored.source,
    )

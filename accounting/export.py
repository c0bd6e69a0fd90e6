"""Writing accounting data as JSON: the event log (the JSONL ``loaders`` reads) and invoice runs.

Money and seconds are decimal strings (``"6.23"``, ``"9000.5"``) so no reader turns them into
binary floats; times are RFC 3339 in UTC.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from accounting.model import Anomaly, Invoice, InvoiceLine, InvoiceRun, PriceClass, UsageEvent, rfc3339


def decimal_text(value: Decimal) -> str:
    """A decimal in plain notation, never exponent form (``0``, not ``0E-6``)."""
    return format(value, "f")


def event_to_json(event: UsageEvent) -> dict[str, str]:
    """One line of an events JSONL file (price_class only when it is not the default)."""
    record = {
        "event_id": event.event_id,
        "tenant_id": event.tenant_id,
        "allocation_id": event.allocation_id,
        "gpu_uuid": event.gpu_uuid,
        "gpu_model": event.gpu_model,
        "kind": event.kind.value,
        "time": rfc3339(event.at_us),
    }
    if event.price_class is not PriceClass.ON_DEMAND:
        record["price_class"] = event.price_class.value
    return record


def write_events(events: Iterable[UsageEvent], out: Path | str | IO[str]) -> int:
    """Write events as JSONL (what ``loaders.load_events`` reads back equal); returns how many."""
    if isinstance(out, Path | str):
        with Path(out).open("w", encoding="utf-8") as handle:
            return write_events(events, handle)
    count = 0
    for event in events:
        out.write(json.dumps(event_to_json(event), separators=(",", ":")) + "\n")
        count += 1
    return count


def _line(line: InvoiceLine) -> dict[str, Any]:
    return {
        "gpu_model": line.gpu_model,
        "price_class": line.price_class.value,
        "gpu_seconds": decimal_text(line.gpu_seconds),
        "gpu_hour_rate": None if line.gpu_hour_rate is None else decimal_text(line.gpu_hour_rate),
        "amount": None if line.amount is None else decimal_text(line.amount),
    }


def _invoice(invoice: Invoice) -> dict[str, Any]:
    return {
        "tenant_id": invoice.tenant_id,
        "lines": [_line(line) for line in invoice.lines],
        "credited_gpu_seconds": decimal_text(invoice.credited_gpu_seconds),
        "total": decimal_text(invoice.total),
    }


def anomaly_to_json(anomaly: Anomaly) -> dict[str, Any]:
    """An anomaly as a JSON object (``other_tenant_ids`` only for cross-tenant overlaps)."""
    record: dict[str, Any] = {
        "kind": anomaly.kind.value,
        "tenant_id": anomaly.tenant_id,
        "gpu_uuid": anomaly.gpu_uuid,
        "allocation_id": anomaly.allocation_id,
        "event_ids": list(anomaly.event_ids),
        "seconds": decimal_text(anomaly.seconds),
        "detail": anomaly.detail,
    }
    if anomaly.other_tenant_ids:
        record["other_tenant_ids"] = list(anomaly.other_tenant_ids)
    return record


def invoice_run_to_json(run: InvoiceRun) -> dict[str, Any]:
    """The whole run as JSON-ready data: period, currency, invoices, anomalies, reconciliation."""
    rec = run.reconciliation
    return {
        "period": {"start": rfc3339(run.period.start_us), "end": rfc3339(run.period.end_us)},
        "currency": run.currency,
        "invoices": [_invoice(invoice) for invoice in run.invoices],
        "anomalies": [anomaly_to_json(anomaly) for anomaly in run.anomalies],
        "reconciliation": {
            "events_in": rec.events_in,
            "events_billed": rec.events_billed,
            "events_in_anomalies": rec.events_in_anomalies,
            "events_outside_period": rec.events_outside_period,
            "events_in_anomalies_by_kind": dict(rec.extra),
            "interval_seconds": decimal_text(rec.interval_seconds),
            "same_tenant_overlap_seconds": decimal_text(rec.same_tenant_overlap_seconds),
            "credited_seconds": decimal_text(rec.credited_seconds),
            "usage_seconds": decimal_text(rec.usage_seconds),
            "committed_covered_seconds": decimal_text(rec.committed_covered_seconds),
            "usage_line_seconds": decimal_text(rec.usage_line_seconds),
            "unpriced_seconds": decimal_text(rec.unpriced_seconds),
            "cross_tenant_overlap_seconds": decimal_text(rec.cross_tenant_overlap_seconds),
            "balanced": not rec.imbalances(),
        },
    }

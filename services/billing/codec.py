"""Finalized invoices and their rate cards as JSON text, for the ``finalized_invoices`` table.

Decimals are stored as strings, so a frozen invoice reads back digit for digit. The layout is
versioned (``"v"``); a reader refuses a version it does not know rather than guess.
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from typing import Any

from accounting import (
    Anomaly,
    AnomalyKind,
    Commitment,
    InvoiceLine,
    PriceClass,
    Rates,
    Reconciliation,
    parse_period,
)
from services.billing.invoice import Adjustment, InvoiceView, LateEvents

VERSION = 1


class CorruptInvoice(ValueError):
    """A stored invoice or rate card that this code cannot read."""


def _dec(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _undec(value: str | None) -> Decimal | None:
    return None if value is None else Decimal(value)


def _reconciliation_to_json(rec: Reconciliation) -> dict[str, Any]:
    # Every field, whatever the accounting library adds: counts as numbers, seconds as strings.
    out: dict[str, Any] = {}
    for f in dataclasses.fields(rec):
        value = getattr(rec, f.name)
        out[f.name] = str(value) if isinstance(value, Decimal) else dict(value) if isinstance(value, dict) else value
    return out


def _reconciliation_from_json(body: dict[str, Any]) -> Reconciliation:
    known = {f.name: f for f in dataclasses.fields(Reconciliation)}
    values: dict[str, Any] = {}
    for name, value in body.items():
        if name not in known:
            raise CorruptInvoice(f"stored reconciliation has an unknown field {name!r}")
        values[name] = Decimal(value) if isinstance(value, str) else value
    return Reconciliation(**values)


def invoice_to_json(view: InvoiceView) -> str:
    """The invoice's body (everything but its finalization time) as compact JSON."""
    body = {
        "v": VERSION,
        "tenant_id": view.tenant_id,
        "period": view.period.name,
        "currency": view.currency,
        "lines": [
            {
                "gpu_model": line.gpu_model,
                "price_class": line.price_class.value,
                "gpu_seconds": str(line.gpu_seconds),
                "gpu_hour_rate": _dec(line.gpu_hour_rate),
                "amount": _dec(line.amount),
            }
            for line in view.lines
        ],
        "credited_gpu_seconds": str(view.credited_gpu_seconds),
        "subtotal": str(view.subtotal),
        "adjustments": [
            {
                "adjusted_period": a.adjusted_period,
                "gpu_model": a.gpu_model,
                "price_class": a.price_class.value,
                "gpu_seconds": str(a.gpu_seconds),
                "amount": _dec(a.amount),
            }
            for a in view.adjustments
        ],
        "anomalies": [
            {
                "kind": a.kind.value,
                "tenant_id": a.tenant_id,
                "gpu_uuid": a.gpu_uuid,
                "allocation_id": a.allocation_id,
                "event_ids": list(a.event_ids),
                "seconds": str(a.seconds),
                "detail": a.detail,
                "other_tenant_ids": list(a.other_tenant_ids),
            }
            for a in view.anomalies
        ],
        "late_events": [
            {
                "adjusted_period": late.adjusted_period,
                "event_ids": list(late.event_ids),
                "gpu_seconds": str(late.gpu_seconds),
                "detail": late.detail,
            }
            for late in view.late_events
        ],
        "reconciliation": _reconciliation_to_json(view.reconciliation),
        "watermark_us": view.watermark_us,
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def invoice_from_json(text: str, *, finalized_us: int | None) -> InvoiceView:
    """The invoice stored by ``invoice_to_json``, marked finalized at ``finalized_us``."""
    try:
        body: dict[str, Any] = json.loads(text)
        if body.get("v") != VERSION:
            raise CorruptInvoice(f"stored invoice has version {body.get('v')!r}; this server reads {VERSION}")
        return InvoiceView(
            tenant_id=body["tenant_id"],
            period=parse_period(body["period"]),
            currency=body["currency"],
            lines=tuple(
                InvoiceLine(
                    gpu_model=line["gpu_model"],
                    price_class=PriceClass(line["price_class"]),
                    gpu_seconds=Decimal(line["gpu_seconds"]),
                    gpu_hour_rate=_undec(line["gpu_hour_rate"]),
                    amount=_undec(line["amount"]),
                )
                for line in body["lines"]
            ),
            credited_gpu_seconds=Decimal(body["credited_gpu_seconds"]),
            subtotal=Decimal(body["subtotal"]),
            adjustments=tuple(
                Adjustment(
                    adjusted_period=a["adjusted_period"],
                    gpu_model=a["gpu_model"],
                    price_class=PriceClass(a["price_class"]),
                    gpu_seconds=Decimal(a["gpu_seconds"]),
                    amount=_undec(a["amount"]),
                )
                for a in body["adjustments"]
            ),
            anomalies=tuple(
                Anomaly(
                    kind=AnomalyKind(a["kind"]),
                    tenant_id=a["tenant_id"],
                    gpu_uuid=a["gpu_uuid"],
                    allocation_id=a["allocation_id"],
                    event_ids=tuple(a["event_ids"]),
                    seconds=Decimal(a["seconds"]),
                    detail=a["detail"],
                    other_tenant_ids=tuple(a["other_tenant_ids"]),
                )
                for a in body["anomalies"]
            ),
            late_events=tuple(
                LateEvents(
                    adjusted_period=late["adjusted_period"],
                    event_ids=tuple(late["event_ids"]),
                    gpu_seconds=Decimal(late["gpu_seconds"]),
                    detail=late["detail"],
                )
                for late in body["late_events"]
            ),
            reconciliation=_reconciliation_from_json(body["reconciliation"]),
            watermark_us=body["watermark_us"],
            finalized_us=finalized_us,
        )
    except CorruptInvoice:
        raise
    except (ValueError, KeyError, TypeError, ArithmeticError) as error:
        raise CorruptInvoice(f"stored invoice is unreadable: {error!r}") from error


def rates_to_json(rates: Rates) -> str:
    """A rate card as compact JSON (prices as decimal strings)."""
    body = {
        "v": VERSION,
        "currency": rates.currency,
        "gpu_hour": {
            model: {price_class.value: str(price) for price_class, price in sorted(prices.items())}
            for model, prices in sorted(rates.gpu_hour.items())
        },
        "commitments": [
            {"tenant_id": c.tenant_id, "gpu_model": c.gpu_model, "gpus": c.gpus, "gpu_hour": str(c.gpu_hour)}
            for c in rates.commitments
        ],
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def rates_from_json(text: str) -> Rates:
    """The rate card stored by ``rates_to_json``."""
    try:
        body: dict[str, Any] = json.loads(text)
        if body.get("v") != VERSION:
            raise CorruptInvoice(f"stored rate card has version {body.get('v')!r}; this server reads {VERSION}")
        return Rates(
            currency=body["currency"],
            gpu_hour={
                model: {PriceClass(k): Decimal(v) for k, v in prices.items()}
                for model, prices in body["gpu_hour"].items()
            },
            commitments=tuple(
                Commitment(c["tenant_id"], c["gpu_model"], int(c["gpus"]), Decimal(c["gpu_hour"]))
                for c in body["commitments"]
            ),
        )
    except CorruptInvoice:
        raise
    except (ValueError, KeyError, TypeError, ArithmeticError) as error:
        raise CorruptInvoice(f"stored rate card is unreadable: {error!r}") from error

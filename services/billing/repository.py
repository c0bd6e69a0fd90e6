"""Persistence for billing, as transaction steps (store/tx.py): reads the usage-event log,
stores and reads finalized invoices.

The only module of the billing package that touches tables. Usage events are written by
placement and release (services/usage/repository.py); billing never writes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from accounting import BillingPeriod, EventKind, PriceClass, UsageEvent, parse_period
from services.billing import codec
from services.billing.invoice import FrozenInvoice, InputCounts, InvoiceView
from services.billing.rules import LoggedEvent
from services.paging import Cursor
from services.store.tx import Sql, Tx

_EVENT_COLUMNS = "event_id, tenant_id, allocation_id, node_id, gpu_uuid, gpu_model, kind, at_us, source, recorded_us"
_INVOICE_COLUMNS = "tenant_id, period, finalized_us, snapshot_us, body, rates, input_counts"


@dataclass(frozen=True)
class StoredEvent:
    """A usage-event row as listed by ListUsageEvents."""

    logged: LoggedEvent
    node_id: str
    source: str


def _stored(row: Sequence[Any]) -> StoredEvent:
    event_id, tenant_id, allocation_id, node_id, gpu_uuid, gpu_model, kind, at_us, source, recorded_us = row
    event = UsageEvent(
        event_id=event_id,
        tenant_id=tenant_id,
        allocation_id=allocation_id,
        gpu_uuid=gpu_uuid,
        gpu_model=gpu_model,
        kind=EventKind(kind),
        at_us=int(at_us),
        # The control plane records no price class yet: every hold is on demand.
        price_class=PriceClass.ON_DEMAND,
    )
    return StoredEvent(LoggedEvent(event, int(recorded_us)), node_id, source)


def event_rows_before(tenant_id: str, end_us: int) -> Tx[list[Sequence[Any]]]:
    """The rows of every event of the tenant that happened before ``end_us`` (an invoice's
    input), oldest first. A tenant's history grows without bound, so callers turn them into
    events with ``logged_events`` in a worker thread, not on the event loop."""
    result = yield Sql(
        f"SELECT {_EVENT_COLUMNS} FROM usage_events WHERE tenant_id = :tenant AND at_us < :end"
        " ORDER BY at_us, event_id",
        {"tenant": tenant_id, "end": end_us},
    )
    return result.rows


def logged_events(rows: Iterable[Sequence[Any]]) -> list[LoggedEvent]:
    """The events of rows read by ``event_rows_before``."""
    return [_stored(row).logged for row in rows]


@dataclass(frozen=True)
class EventFilter:
    """ListUsageEvents' filters: a tenant (None: every one) and ``start_us <= at_us < end_us`` (None: unbounded)."""

    tenant_id: str | None = None
    start_us: int | None = None
    end_us: int | None = None


def list_events(flt: EventFilter, *, cursor: Cursor | None, limit: int) -> Tx[list[StoredEvent]]:
    """Oldest first by (at_us, event_id): immutable, with a unique tiebreaker."""
    where = ["TRUE"]
    params: dict[str, Any] = {"limit": limit}
    if flt.tenant_id is not None:
        where.append("tenant_id = :tenant")
        params["tenant"] = flt.tenant_id
    if flt.start_us is not None:
        where.append("at_us >= :start")
        params["start"] = flt.start_us
    if flt.end_us is not None:
        where.append("at_us < :end")
        params["end"] = flt.end_us
    if cursor is not None:
        where.append("(at_us, event_id) > (:after_us, :after_id)")
        params.update(after_us=cursor.created_us, after_id=cursor.last_id)
    result = yield Sql(
        f"SELECT {_EVENT_COLUMNS} FROM usage_events WHERE {' AND '.join(where)} ORDER BY at_us, event_id LIMIT :limit",
        params,
    )
    return [_stored(row) for row in result.rows]


@dataclass(frozen=True, slots=True)
class FinalizedRow:
    """One row of the ``finalized_invoices`` table, as stored (``frozen_invoice`` decodes it)."""

    tenant_id: str
    period: str
    finalized_us: int
    snapshot_us: int
    body: str
    rates: str
    input_counts: str | None


def finalized_rows(tenant_id: str) -> Tx[list[FinalizedRow]]:
    """The rows of every finalized invoice of the tenant; read them with ``frozen_invoice``."""
    result = yield Sql(
        f"SELECT {_INVOICE_COLUMNS} FROM finalized_invoices WHERE tenant_id = :tenant", {"tenant": tenant_id}
    )
    return [FinalizedRow(*row) for row in result.rows]


def frozen_invoice(row: FinalizedRow) -> FrozenInvoice:
    """The finalized invoice of a row read by ``finalized_rows``."""
    view = codec.invoice_from_json(row.body, finalized_us=int(row.finalized_us))
    counts = {parse_period(name): int(n) for name, n in json.loads(row.input_counts or "{}").items()}
    return FrozenInvoice(view, row.rates, int(row.snapshot_us), counts)


def frozen_invoices(rows: Iterable[FinalizedRow]) -> dict[BillingPeriod, FrozenInvoice]:
    """The finalized invoices of rows read by ``finalized_rows``, by period."""
    return {parse_period(row.period): frozen_invoice(row) for row in rows}


def finalized_row(
    view: InvoiceView, *, rates_json: str, snapshot_us: int, finalized_us: int, input_counts: InputCounts
) -> FinalizedRow:
    """The row that freezes ``view``. Built before the write transaction opens: encoding an
    invoice is CPU work that need not hold SQLite's write lock."""
    return FinalizedRow(
        tenant_id=view.tenant_id,
        period=view.period.name,
        finalized_us=finalized_us,
        snapshot_us=snapshot_us,
        body=codec.invoice_to_json(view),
        rates=rates_json,
        input_counts=json.dumps({period.name: n for period, n in sorted(input_counts.items())}),
    )


def insert_finalized(row: FinalizedRow) -> Tx[None]:
    """Insert a ``finalized_row``. The primary key (tenant_id, period) refuses a second copy
    (``tx.Refused``)."""
    yield Sql(
        f"INSERT INTO finalized_invoices ({_INVOICE_COLUMNS}) VALUES (:tenant_id, :period, :finalized_us,"
        " :snapshot_us, :body, :rates, :input_counts)",
        {
            "tenant_id": row.tenant_id,
            "period": row.period,
            "finalized_us": row.finalized_us,
            "snapshot_us": row.snapshot_us,
            "body": row.body,
            "rates": row.rates,
            "input_counts": row.input_counts,
        },
    )

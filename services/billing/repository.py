"""Persistence for billing: reads the usage-event log, stores and reads finalized invoices.

The only module of the billing package that touches tables. Usage events are written by
placement and release (services/usage/repository.py); billing never writes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select as sa_select
from sqlalchemy import tuple_
from sqlmodel.ext.asyncio.session import AsyncSession

from accounting import BillingPeriod, EventKind, PriceClass, UsageEvent, parse_period
from services.billing import codec
from services.billing.invoice import FrozenInvoice, InputCounts, InvoiceView
from services.billing.rules import LoggedEvent
from services.paging import Cursor
from services.store import core
from services.store.models import FinalizedInvoiceRow, TenantRow, UsageEventRow, table_of

_EVENTS = table_of(UsageEventRow)
_INVOICES = table_of(FinalizedInvoiceRow)


@dataclass(frozen=True)
class StoredEvent:
    """A usage-event row as listed by ListUsageEvents."""

    logged: LoggedEvent
    node_id: str
    source: str


def _stored(row: Any) -> StoredEvent:
    event = UsageEvent(
        event_id=row.event_id,
        tenant_id=row.tenant_id,
        allocation_id=row.allocation_id,
        gpu_uuid=row.gpu_uuid,
        gpu_model=row.gpu_model,
        kind=EventKind(row.kind),
        at_us=int(row.at_us),
        # The control plane records no price class yet: every hold is on demand.
        price_class=PriceClass.ON_DEMAND,
    )
    return StoredEvent(LoggedEvent(event, int(row.recorded_us)), row.node_id, row.source)


async def tenant_exists(session: AsyncSession, tenant_id: str) -> bool:
    """Whether a tenant with this id exists."""
    return await session.get(TenantRow, tenant_id) is not None


async def event_rows_before(session: AsyncSession, tenant_id: str, end_us: int) -> Sequence[Any]:
    """The rows of every event of the tenant that happened before ``end_us`` (an invoice's
    input), oldest first. A tenant's history grows without bound, so callers turn them into
    events with ``logged_events`` in a worker thread, not on the event loop."""
    query = (
        sa_select(_EVENTS)
        .where(_EVENTS.c.tenant_id == tenant_id, _EVENTS.c.at_us < end_us)
        .order_by(_EVENTS.c.at_us, _EVENTS.c.event_id)
    )
    return (await core.execute(session, query)).all()


def logged_events(rows: Iterable[Any]) -> list[LoggedEvent]:
    """The events of rows read by ``event_rows_before``."""
    return [_stored(row).logged for row in rows]


@dataclass(frozen=True)
class EventFilter:
    """ListUsageEvents' filters: a tenant (None: every one) and ``start_us <= at_us < end_us`` (None: unbounded)."""

    tenant_id: str | None = None
    start_us: int | None = None
    end_us: int | None = None


async def list_events(
    session: AsyncSession, flt: EventFilter, *, cursor: Cursor | None, limit: int
) -> list[StoredEvent]:
    """Oldest first by (at_us, event_id): immutable, with a unique tiebreaker."""
    query = sa_select(_EVENTS)
    if flt.tenant_id is not None:
        query = query.where(_EVENTS.c.tenant_id == flt.tenant_id)
    if flt.start_us is not None:
        query = query.where(_EVENTS.c.at_us >= flt.start_us)
    if flt.end_us is not None:
        query = query.where(_EVENTS.c.at_us < flt.end_us)
    if cursor is not None:
        query = query.where(tuple_(_EVENTS.c.at_us, _EVENTS.c.event_id) > tuple_(cursor.created_us, cursor.last_id))
    query = query.order_by(_EVENTS.c.at_us, _EVENTS.c.event_id).limit(limit)
    return [_stored(row) for row in (await core.execute(session, query)).all()]


async def finalized_rows(session: AsyncSession, tenant_id: str) -> Sequence[Any]:
    """The rows of every finalized invoice of the tenant; read them with ``frozen_invoice``."""
    return (await core.execute(session, sa_select(_INVOICES).where(_INVOICES.c.tenant_id == tenant_id))).all()


def frozen_invoice(row: Any) -> FrozenInvoice:
    """The finalized invoice of a row read by ``finalized_rows``."""
    view = codec.invoice_from_json(row.body, finalized_us=int(row.finalized_us))
    counts = {parse_period(name): int(n) for name, n in json.loads(row.input_counts or "{}").items()}
    return FrozenInvoice(view, row.rates, int(row.snapshot_us), counts)


def frozen_invoices(rows: Iterable[Any]) -> dict[BillingPeriod, FrozenInvoice]:
    """The finalized invoices of rows read by ``finalized_rows``, by period."""
    return {parse_period(row.period): frozen_invoice(row) for row in rows}


def finalized_row(
    view: InvoiceView, *, rates_json: str, snapshot_us: int, finalized_us: int, input_counts: InputCounts
) -> dict[str, Any]:
    """The row that freezes ``view``. Built before the write transaction opens: encoding an
    invoice is CPU work that need not hold SQLite's write lock."""
    return {
        "tenant_id": view.tenant_id,
        "period": view.period.name,
        "finalized_us": finalized_us,
        "snapshot_us": snapshot_us,
        "body": codec.invoice_to_json(view),
        "rates": rates_json,
        "input_counts": json.dumps({period.name: n for period, n in sorted(input_counts.items())}),
    }


async def insert_finalized(session: AsyncSession, row: dict[str, Any]) -> None:
    """Insert a ``finalized_row``. The primary key (tenant_id, period) refuses a second copy
    (IntegrityError)."""
    await core.execute(session, _INVOICES.insert(), [row])

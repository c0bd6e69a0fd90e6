"""Persistence for billing: reads the usage-event log, stores and reads finalized invoices.

The only module of the billing package that touches tables. Usage events are written by
placement and release (services/usage/repository.py); billing never writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select as sa_select
from sqlalchemy import tuple_
from sqlmodel.ext.asyncio.session import AsyncSession

from accounting.model import EventKind, PriceClass, UsageEvent
from accounting.periods import BillingPeriod, parse_period
from services.billing import codec
from services.billing.invoice import FrozenInvoice, InvoiceView
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
    return await session.get(TenantRow, tenant_id) is not None


async def events_before(session: AsyncSession, tenant_id: str, end_us: int) -> list[LoggedEvent]:
    """Every event of the tenant that happened before ``end_us`` (an invoice's input)."""
    query = (
        sa_select(_EVENTS)
        .where(_EVENTS.c.tenant_id == tenant_id, _EVENTS.c.at_us < end_us)
        .order_by(_EVENTS.c.at_us, _EVENTS.c.event_id)
    )
    return [_stored(row).logged for row in (await core.execute(session, query)).all()]


@dataclass(frozen=True)
class EventFilter:
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


async def finalized(session: AsyncSession, tenant_id: str) -> dict[BillingPeriod, FrozenInvoice]:
    """Every finalized invoice of the tenant, by period."""
    query = sa_select(_INVOICES).where(_INVOICES.c.tenant_id == tenant_id)
    frozen: dict[BillingPeriod, FrozenInvoice] = {}
    for row in (await core.execute(session, query)).all():
        view = codec.invoice_from_json(row.body, finalized_us=int(row.finalized_us))
        frozen[parse_period(row.period)] = FrozenInvoice(view, row.rates, int(row.snapshot_us))
    return frozen


async def insert_finalized(
    session: AsyncSession, view: InvoiceView, *, rates_json: str, snapshot_us: int, finalized_us: int
) -> None:
    """Freeze ``view``. The primary key (tenant_id, period) refuses a second copy (IntegrityError)."""
    row = {
        "tenant_id": view.tenant_id,
        "period": view.period.name,
        "finalized_us": finalized_us,
        "snapshot_us": snapshot_us,
        "body": codec.invoice_to_json(view),
        "rates": rates_json,
    }
    await core.execute(session, _INVOICES.insert(), [row])

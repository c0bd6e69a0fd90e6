"""Billing use cases: read an invoice, finalize one, page through the usage-event log.

Reads run in one read transaction, one snapshot on either database (store/engine.py); turning
the rows into events and the invoice computation then run in a worker thread (both are CPU
work, DuckDB blocks), so a tenant with a long history never stalls other RPCs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import structlog

from accounting import BillingPeriod, Rates, rfc3339
from services.auth.principal import Principal, tenant_scope
from services.billing import codec, compute
from services.billing import repository as repo
from services.billing.invoice import InputCounts, InvoiceView
from services.billing.repository import EventFilter, FinalizedRow, StoredEvent
from services.clock import now_us
from services.errors import FailedPrecondition, NotFound
from services.paging import Cursor, cut_page
from services.store.engine import Database
from services.store.tx import Refused, Tx
from services.tenants import repository as tenants_repo

log = structlog.get_logger(__name__)


def invoice_not_found(tenant_id: str, period: BillingPeriod) -> NotFound:
    """NOT_FOUND (INVOICE_NOT_FOUND): no invoice of ``tenant_id`` for ``period`` that the caller may see."""
    return NotFound(
        reason="INVOICE_NOT_FOUND",
        message=f"no invoice of tenant {tenant_id!r} for {period}",
        metadata={"tenant_id": tenant_id, "period": period.name, "field": "tenant_id"},
    )


def resolve_tenant(principal: Principal, requested: str, period: BillingPeriod) -> str:
    """Whose invoice: the caller's own by default. A tenant naming another tenant gets NOT_FOUND,
    exactly as for a tenant that does not exist, so tenants cannot be probed."""
    own = tenant_scope(principal)
    if own is not None and requested and requested != own:
        raise invoice_not_found(requested, period)
    return own or requested


def _open_invoice(
    tenant_id: str,
    period: BillingPeriod,
    event_rows: Sequence[Sequence[Any]],
    frozen_rows: Sequence[FinalizedRow],
    rates: Rates,
) -> compute.OpenInvoice:
    """In a worker thread: reading a long history into events is CPU work, like the engine."""
    events = repo.logged_events(event_rows)
    finalized = repo.frozen_invoices(frozen_rows)
    return compute.open_invoice(tenant_id, period, events, rates, finalized)


class Billing:
    """The billing use cases over one store and one rate card (the server's)."""

    def __init__(self, store: Database, rates: Rates) -> None:
        self._store = store
        self._rates = rates
        self._rates_json = codec.rates_to_json(rates)

    async def invoice(self, tenant_id: str, period: BillingPeriod) -> InvoiceView:
        """The frozen invoice if the period is finalized, else one computed from the log now."""
        view, _snapshot, _counts = await self._current(tenant_id, period)
        return view

    async def _current(self, tenant_id: str, period: BillingPeriod) -> tuple[InvoiceView, int, InputCounts]:
        snapshot_us = now_us()
        frozen_rows, event_rows = await self._store.query(_invoice_inputs(tenant_id, period))
        mine = next((row for row in frozen_rows if row.period == period.name), None)
        if mine is not None:
            frozen = repo.frozen_invoice(mine)
            return frozen.view, frozen.snapshot_us, frozen.input_counts
        view, counts = await asyncio.to_thread(_open_invoice, tenant_id, period, event_rows, frozen_rows, self._rates)
        return view, snapshot_us, counts

    async def finalize(self, tenant_id: str, period: BillingPeriod) -> tuple[InvoiceView, bool]:
        """Freeze the period's invoice as it reads now; (invoice, True) if this call froze it.

        Idempotent: a finalized invoice is returned unchanged, and of two concurrent calls one
        inserts and the other returns the winner's invoice.
        """
        now = now_us()
        if period.end_us > now:
            # An unknown tenant is NOT_FOUND for every period, as it is for GetInvoice.
            await self._store.query(tenants_repo.require(tenant_id))
            raise FailedPrecondition(
                reason="PERIOD_NOT_ENDED",
                message=(f"{period} ends at {rfc3339(period.end_us)}; only a period that has ended can be finalized"),
                metadata={"period": period.name, "field": "period"},
            )
        view, snapshot_us, counts = await self._current(tenant_id, period)
        if view.finalized:
            return view, False
        finalized_us = now_us()
        # Encoding a large invoice is CPU work: off the loop, and before the write lock is taken.
        row = await asyncio.to_thread(
            partial(
                repo.finalized_row,
                view,
                rates_json=self._rates_json,
                snapshot_us=snapshot_us,
                finalized_us=finalized_us,
                input_counts=counts,
            )
        )
        try:
            await self._store.transact(partial(repo.insert_finalized, row))
        except Refused:
            # A concurrent finalize won; its invoice is the one that stands.
            return await self.invoice(tenant_id, period), False
        log.info("invoice_finalized", tenant=tenant_id, period=period.name, total=str(view.total))
        return replace(view, finalized_us=finalized_us), True

    async def events_page(
        self, flt: EventFilter, *, cursor: Cursor | None, page_size: int, tenant_must_exist: bool = False
    ) -> tuple[list[StoredEvent], Cursor | None]:
        """One page of the usage-event log and the cursor after it (None on the last page).
        ``tenant_must_exist``: an operator named the filter's tenant; NOT_FOUND if none such."""
        rows = await self._store.query(
            _events_page(flt, cursor=cursor, limit=page_size + 1, tenant_must_exist=tenant_must_exist)
        )
        return cut_page(rows, page_size, lambda row: Cursor(row.logged.event.at_us, row.logged.event.event_id))


def _invoice_inputs(tenant_id: str, period: BillingPeriod) -> Tx[tuple[list[FinalizedRow], list[Sequence[Any]]]]:
    """What an invoice is computed from, in one snapshot: the tenant's finalized invoices and,
    unless the period is one of them, its events before the period's end.

    An unknown tenant is NOT_FOUND (TENANT_NOT_FOUND). Only an operator gets that far (a tenant
    asks for its own, or is refused by ``resolve_tenant`` first), so naming the tenant probes
    nothing: it reads as a typo in the parent would in ListAllocations."""
    yield from tenants_repo.require(tenant_id)
    frozen_rows = yield from repo.finalized_rows(tenant_id)
    if any(row.period == period.name for row in frozen_rows):
        return frozen_rows, []
    return frozen_rows, (yield from repo.event_rows_before(tenant_id, period.end_us))


def _events_page(
    flt: EventFilter, *, cursor: Cursor | None, limit: int, tenant_must_exist: bool
) -> Tx[list[StoredEvent]]:
    if tenant_must_exist and flt.tenant_id is not None:
        yield from tenants_repo.require(flt.tenant_id)
    return (yield from repo.list_events(flt, cursor=cursor, limit=limit))

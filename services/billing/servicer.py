"""BillingService: protobuf in, domain calls, protobuf out. No rules live here."""

from __future__ import annotations

from typing import Any

import grpc

from accounting import BadPeriod, BillingPeriod, parse_period
from gpucloud.v1 import billing_pb2, billing_pb2_grpc
from services.auth.principal import current_principal, tenant_scope
from services.billing.commands import Billing, resolve_tenant
from services.billing.proto import invoice_to_proto, usage_event_to_proto
from services.billing.repository import EventFilter
from services.paging import PageTokens
from services.tenant_lists import TenantList
from services.validation import Violations

Context = grpc.aio.ServicerContext[Any, Any]


def _period(v: Violations, value: str) -> BillingPeriod | None:
    if not value:
        v.add("period", "is required (YYYY-MM, e.g. 2026-11)")
        return None
    try:
        return parse_period(value)
    except BadPeriod as error:
        v.add("period", str(error))
        return None


class BillingServicer(billing_pb2_grpc.BillingServiceServicer):
    """BillingService: checks each request (tenant, period, time range), then calls ``Billing``."""

    def __init__(self, billing: Billing, page_tokens: PageTokens) -> None:
        self._billing = billing
        self._tokens = page_tokens

    def _target(
        self, request: billing_pb2.GetInvoiceRequest | billing_pb2.FinalizeInvoiceRequest
    ) -> tuple[str, BillingPeriod]:
        principal = current_principal()
        v = Violations()
        v.identifier("tenant_id", request.tenant_id, required=tenant_scope(principal) is None)
        period = _period(v, request.period)
        v.raise_if_any()
        assert period is not None
        return resolve_tenant(principal, request.tenant_id, period), period

    async def GetInvoice(
        self, request: billing_pb2.GetInvoiceRequest, context: Context
    ) -> billing_pb2.GetInvoiceResponse:
        """Read a tenant's invoice for a period (operators name the tenant); another tenant's is NOT_FOUND."""
        tenant_id, period = self._target(request)
        view = await self._billing.invoice(tenant_id, period)
        return billing_pb2.GetInvoiceResponse(invoice=invoice_to_proto(view))

    async def FinalizeInvoice(
        self, request: billing_pb2.FinalizeInvoiceRequest, context: Context
    ) -> billing_pb2.FinalizeInvoiceResponse:
        """Freeze a tenant's invoice for an ended period; ``newly_finalized`` says whether this call froze it."""
        tenant_id, period = self._target(request)
        view, newly = await self._billing.finalize(tenant_id, period)
        return billing_pb2.FinalizeInvoiceResponse(invoice=invoice_to_proto(view), newly_finalized=newly)

    async def ListUsageEvents(
        self, request: billing_pb2.ListUsageEventsRequest, context: Context
    ) -> billing_pb2.ListUsageEventsResponse:
        """List usage events; tenants see only their own (another's reads empty); an unknown tenant is NOT_FOUND."""
        v = Violations()
        size = v.page_size("page_size", request.page_size)
        v.identifier("tenant_id", request.tenant_id, required=False)
        start, end = request.start_time, request.end_time
        start_us = v.timestamp_us("start_time", start.seconds, start.nanos) if request.HasField("start_time") else None
        end_us = v.timestamp_us("end_time", end.seconds, end.nanos) if request.HasField("end_time") else None
        if start_us is not None and end_us is not None and end_us <= start_us:
            v.add("end_time", "must be after start_time")
        listing = TenantList(current_principal(), request.tenant_id)
        scope = listing.scope(
            "usage_events", start_us="" if start_us is None else start_us, end_us="" if end_us is None else end_us
        )
        cursor = v.page_token(self._tokens, request.page_token, scope)
        v.raise_if_any()
        if listing.of_another_tenant:
            return billing_pb2.ListUsageEventsResponse()
        flt = EventFilter(tenant_id=listing.tenant_id, start_us=start_us, end_us=end_us)
        page, after = await self._billing.events_page(
            flt, cursor=cursor, page_size=size, tenant_must_exist=listing.tenant_must_exist
        )
        return billing_pb2.ListUsageEventsResponse(
            usage_events=[usage_event_to_proto(e) for e in page],
            next_page_token=self._tokens.next_token(after, scope),
        )

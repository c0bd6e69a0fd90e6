"""BillingService end to end: tenant scoping, the audit round trip, finalization and adjustments."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Literal, TypedDict

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rich.progress import Progress
from sqlalchemy import select

from accounting.export import invoice_run_to_json
from accounting.model import datetime_to_us, us_to_seconds
from accounting.periods import BillingPeriod, period_of
from clients import (
    AsyncClient,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from clients.cli.billing import export_events, export_window, invoice_to_json
from clients.cli.invoice import OfflineInputs, compute_offline
from clients.errors import from_rpc_error
from gpucloud.v1 import billing_pb2, billing_pb2_grpc
from services.clock import now_us
from services.store.engine import Database
from services.store.models import FinalizedInvoiceRow, UsageEventRow, table_of
from tests.conftest import RunningControlPlane, register_ready_nodes, running_control_plane
from tests.e2e.helpers import new_tenant

HOUR_US = 3600 * 1_000_000
RATES = {"currency": "EUR", "gpu_hour": {"H100": {"on_demand": "2.49", "spot": "1.10"}}}


class _TimeBounds(TypedDict, total=False):
    """ListUsageEventsRequest's time fields, set one at a time by name."""

    start_time: Timestamp
    end_time: Timestamp


def _us(moment: datetime | None) -> int:
    assert moment is not None
    return datetime_to_us(moment)


def _current_period() -> BillingPeriod:
    return period_of(now_us())


async def insert_events(database_url: str, rows: Sequence[dict[str, object]]) -> None:
    """Write usage events straight into the store, as an agent spooling through an outage would."""
    store = await Database.open(database_url)
    try:
        async with store.write() as session:
            connection = await session.connection()
            await connection.execute(table_of(UsageEventRow).insert(), list(rows))
    finally:
        await store.close()


async def stored_counts(database_url: str, period: BillingPeriod) -> dict[str, int]:
    """The event counts FinalizeInvoice stored with acme's invoice for ``period``."""
    store = await Database.open(database_url)
    try:
        async with store.read() as session:
            invoices = table_of(FinalizedInvoiceRow)
            query = select(invoices.c.input_counts).where(
                invoices.c.tenant_id == "acme", invoices.c.period == period.name
            )
            stored = (await (await session.connection()).execute(query)).scalar_one()
    finally:
        await store.close()
    counts: dict[str, int] = json.loads(stored)
    return counts


def event(allocation_id: str, gpu: str, kind: str, at_us: int, *, recorded_us: int | None = None) -> dict[str, object]:
    return {
        "event_id": f"{allocation_id}/{gpu}/{kind}",
        "tenant_id": "acme",
        "allocation_id": allocation_id,
        "node_id": "node-x",
        "gpu_uuid": gpu,
        "gpu_model": "H100",
        "kind": kind,
        "at_us": at_us,
        "source": "test-agent",
        "recorded_us": at_us if recorded_us is None else recorded_us,
    }


@pytest.fixture
async def rated_plane(tmp_path: Path, database_url: str) -> AsyncIterator[RunningControlPlane]:
    """A control plane that prices with RATES (EUR) instead of the built-in card."""
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps(RATES))
    async with running_control_plane(tmp_path / "data", database_url, rates_path=rates) as running:
        yield running


@pytest.fixture
async def rated_operator(rated_plane: RunningControlPlane) -> AsyncIterator[AsyncClient]:
    async with rated_plane.client() as client:
        yield client


class TestScoping:
    async def test_a_tenant_sees_only_its_own_invoice(
        self, control_plane: RunningControlPlane, operator: AsyncClient
    ) -> None:
        """Own invoice by default; another tenant's, or one that does not exist, is NOT_FOUND alike."""
        await register_ready_nodes(operator, 2)
        acme = await new_tenant(operator, control_plane, "acme")
        globex = await new_tenant(operator, control_plane, "globex")
        async with acme, globex:
            await acme.create_allocation(gpu_model="H100", node_count=1)
            period = _current_period().name
            own = await acme.get_invoice(period)
            assert (own.tenant_id, own.period, own.finalized) == ("acme", period, False)
            assert [(line.gpu_model, line.price_class) for line in own.lines] == [("H100", "ON_DEMAND")]
            assert (await acme.get_invoice(period, tenant_id="acme")).lines == own.lines
            for other in ("globex", "nobody"):
                with pytest.raises(NotFoundError) as caught:
                    await acme.get_invoice(period, tenant_id=other)
                assert caught.value.reason == "INVOICE_NOT_FOUND"
            # globex's own invoice holds none of acme's usage.
            assert (await globex.get_invoice(period)).lines == ()
            # The operator reads anyone's, but must say whose.
            assert (await operator.get_invoice(period, tenant_id="acme")).tenant_id == "acme"
            with pytest.raises(InvalidArgumentError) as missing:
                await operator.get_invoice(period)
            assert list(missing.value.field_violations) == ["tenant_id"]
            with pytest.raises(NotFoundError) as unknown:
                await operator.get_invoice(period, tenant_id="nobody")
            assert unknown.value.reason == "TENANT_NOT_FOUND"
            assert unknown.value.metadata["tenant_id"] == "nobody"
            # Only operators finalize.
            with pytest.raises(PermissionDeniedError):
                await acme.finalize_invoice(period, tenant_id="acme")

    # The last two are 2026-01 in fullwidth and Arabic-Indic digits: digits, but not ASCII ones.
    @pytest.mark.parametrize(
        "bad",
        [
            "2026-13",
            "2026-1",
            "November",
            "1969-12",
            "",
            "\uff12\uff10\uff12\uff16-\uff10\uff11",
            "\u0662\u0660\u0662\u0666-\u0660\u0661",
        ],
    )
    async def test_a_bad_period_is_invalid_argument_naming_the_field(self, operator: AsyncClient, bad: str) -> None:
        await operator.create_tenant("acme")
        with pytest.raises(InvalidArgumentError) as caught:
            await operator.get_invoice(bad, tenant_id="acme")
        assert caught.value.reason == "INVALID_FIELD"
        assert list(caught.value.field_violations) == ["period"]
        with pytest.raises(InvalidArgumentError) as bad_tenant:
            await operator.finalize_invoice("2020-01", tenant_id="Not A Tenant")
        assert list(bad_tenant.value.field_violations) == ["tenant_id"]

    async def test_the_first_period_reads_and_finalizes(self, operator: AsyncClient) -> None:
        """1970-01, the earliest period accepted, is an empty invoice that finalizes, not INTERNAL."""
        await operator.create_tenant("acme")
        invoice = await operator.get_invoice("1970-01", tenant_id="acme")
        assert (invoice.period, invoice.lines, invoice.total) == ("1970-01", (), Decimal(0))
        finalized = await operator.finalize_invoice("1970-01", tenant_id="acme")
        assert (finalized.invoice.period, finalized.newly_finalized) == ("1970-01", True)
        assert (await operator.get_invoice("1970-02", tenant_id="acme")).period == "1970-02"

    async def test_finalizing_for_an_unknown_tenant_is_not_found_whatever_the_period(
        self, operator: AsyncClient
    ) -> None:
        """NOT_FOUND for a tenant that does not exist, before the period check a known tenant meets."""
        await operator.create_tenant("acme")
        for period in ("2020-01", "9998-12"):
            with pytest.raises(NotFoundError) as missing:
                await operator.finalize_invoice(period, tenant_id="nobody")
            assert (missing.value.reason, missing.value.metadata["field"]) == ("TENANT_NOT_FOUND", "tenant_id")
        with pytest.raises(FailedPreconditionError) as early:
            await operator.finalize_invoice("9998-12", tenant_id="acme")
        assert early.value.reason == "PERIOD_NOT_ENDED"

    @pytest.mark.parametrize(
        ("field", "seconds", "nanos"),
        [
            ("start_time", 2**62, 0),
            ("end_time", 10**13, 0),
            ("start_time", -70_000_000_000, 0),
            ("start_time", 10, -5),
            ("end_time", 10, 2_000_000_000),
        ],
    )
    async def test_a_time_outside_what_a_timestamp_holds_is_invalid_argument(
        self,
        control_plane: RunningControlPlane,
        field: Literal["start_time", "end_time"],
        seconds: int,
        nanos: int,
    ) -> None:
        """Sent raw (the typed client cannot build them): INVALID_ARGUMENT naming the field, not INTERNAL."""
        bounds: _TimeBounds = {}
        bounds[field] = Timestamp(seconds=seconds, nanos=nanos)
        request = billing_pb2.ListUsageEventsRequest(**bounds)
        metadata = (("authorization", f"Bearer {control_plane.operator_token}"),)
        async with grpc.aio.insecure_channel(control_plane.address) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await billing_pb2_grpc.BillingServiceStub(channel).ListUsageEvents(
                    request, metadata=metadata, timeout=15
                )
        error = from_rpc_error(caught.value)
        assert isinstance(error, InvalidArgumentError)
        assert list(error.field_violations) == [field]

    async def test_usage_events_are_scoped_and_paged(
        self, control_plane: RunningControlPlane, operator: AsyncClient
    ) -> None:
        """A tenant lists only its own events; pages never repeat or skip; the token is bound to its filters."""
        await register_ready_nodes(operator, 3)
        acme = await new_tenant(operator, control_plane, "acme")
        globex = await new_tenant(operator, control_plane, "globex")
        async with acme, globex:
            first = await acme.create_allocation(gpu_model="H100", node_count=2)
            await globex.create_allocation(gpu_model="H100", node_count=1)
            seen: list[str] = []
            token = ""
            for _ in range(20):
                page = await acme.list_usage_events(page_size=5, page_token=token)
                seen += [e.event_id for e in page]
                token = page.next_page_token
                if not token:
                    break
            assert len(seen) == len(set(seen)) == 16
            assert all(e.startswith(first.allocation_id + "/") for e in seen)
            assert len(await acme.list_usage_events(tenant_id="globex")) == 0
            assert len(await acme.list_usage_events(tenant_id="nobody")) == 0  # same answer: no leak
            # An operator naming a tenant that does not exist is told so, not given an empty log.
            with pytest.raises(NotFoundError) as unknown:
                await operator.list_usage_events(tenant_id="nobody")
            assert unknown.value.metadata["field"] == "tenant_id"
            assert len(await operator.list_usage_events(tenant_id="globex")) == 8
            everything = await operator.list_usage_events(page_size=1000)
            assert len(everything) == 24
            assert [(e.event_time, e.event_id) for e in everything] == sorted(
                (e.event_time, e.event_id) for e in everything
            )
            # A page token is bound to the filters it was issued for.
            token = (await acme.list_usage_events(page_size=5)).next_page_token
            with pytest.raises(InvalidArgumentError) as caught:
                await acme.list_usage_events(page_size=5, page_token=token, start_time=datetime(2020, 1, 1, tzinfo=UTC))
            assert caught.value.reason == "INVALID_PAGE_TOKEN"
            # A window that ends before the allocation began holds nothing.
            assert len(await operator.list_usage_events(end_time=first.create_time)) == 0


async def test_online_invoice_equals_the_offline_one_from_the_export(
    rated_plane: RunningControlPlane, rated_operator: AsyncClient, tmp_path: Path
) -> None:
    """`usage export` then the offline engine reproduces the served invoice line for line."""
    operator = rated_operator
    await register_ready_nodes(operator, 3)
    await operator.create_tenant("acme")
    await operator.create_tenant("globex")
    done = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="globex")
    operation = await operator.cancel_allocation(done.allocation_id)
    assert (await operator.wait_operation(operation.name, timeout=15)).done

    period = _current_period()
    online = await operator.get_invoice(period.name, tenant_id="acme")
    assert online.currency == "EUR"

    exported = io.StringIO()
    start, end = export_window(None, None, period.name)
    count = await export_events(
        operator, exported, tenant="acme", start=start, end=end, progress=Progress(disable=True)
    )
    assert count == 8 + 8 + 8  # start+stop of the cancelled one, start of the running one
    events_file = tmp_path / "acme.jsonl"
    events_file.write_text(exported.getvalue())
    rates_file = tmp_path / "rates.json"
    rates_file.write_text(json.dumps(RATES))
    run = compute_offline(
        OfflineInputs(
            events_file,
            rates_file,
            f"{period.name}-01T00:00:00Z",
            f"{period.next().name}-01T00:00:00Z",
        )
    )
    offline = invoice_run_to_json(run)
    served = invoice_to_json(online)
    assert [invoice["tenant_id"] for invoice in offline["invoices"]] == ["acme"]
    assert served["lines"] == offline["invoices"][0]["lines"]
    assert served["subtotal"] == offline["invoices"][0]["total"] == served["total"]
    assert served["anomalies"] == offline["anomalies"]
    assert served["reconciliation"] == {k: v for k, v in offline["reconciliation"].items() if k != "balanced"}
    assert [a["kind"] for a in served["anomalies"]] == ["OPEN_AT_PERIOD_END"] * 8
    # And the amount is the rate card's: GPU-seconds x 2.49 EUR / 3600, rounded to cents.
    (line,) = online.lines
    assert line.amount == (line.gpu_seconds * Decimal("2.49") / 3600).quantize(Decimal("0.01"))


async def test_finalize_is_idempotent_and_late_events_become_adjustments(
    control_plane: RunningControlPlane, operator: AsyncClient, database_url: str
) -> None:
    """A frozen invoice never changes; an event of its period that arrives later is corrected on the next one."""
    await operator.create_tenant("acme")
    closed = period_of(now_us())
    for _ in range(3):
        closed = closed.previous()
    following = closed.next()
    t0 = closed.start_us
    await insert_events(
        database_url,
        [
            event("alloc-a", "GPU-a", "start", t0 + HOUR_US),
            event("alloc-a", "GPU-a", "stop", t0 + 3 * HOUR_US),
            # Held past the period's end as far as anyone knows at finalization.
            event("alloc-b", "GPU-b", "start", t0 + 5 * HOUR_US),
        ],
    )
    with pytest.raises(FailedPreconditionError) as not_ended:
        await operator.finalize_invoice(_current_period().name, tenant_id="acme")
    assert not_ended.value.reason == "PERIOD_NOT_ENDED"
    # Times in the form every other message uses: RFC 3339 with Z.
    assert f"ends at {_current_period().next().name}-01T00:00:00Z;" in not_ended.value.message

    first = await operator.finalize_invoice(closed.name, tenant_id="acme")
    assert first.newly_finalized
    assert first.invoice.finalized
    assert first.invoice.finalize_time is not None
    # What later reads compare with to decide whether the period needs recomputing.
    assert await stored_counts(database_url, closed) == {closed.name: 3}
    billed = us_to_seconds(2 * HOUR_US + closed.end_us - (t0 + 5 * HOUR_US))
    assert [line.gpu_seconds for line in first.invoice.lines] == [billed]
    again = await operator.finalize_invoice(closed.name, tenant_id="acme")
    assert not again.newly_finalized
    assert again.invoice == first.invoice == await operator.get_invoice(closed.name, tenant_id="acme")

    # The stop of GPU-b arrives now: it happened one hour after its start, inside the closed period.
    late = event("alloc-b", "GPU-b", "stop", t0 + 6 * HOUR_US, recorded_us=now_us())
    await insert_events(database_url, [late])
    frozen = await operator.get_invoice(closed.name, tenant_id="acme")
    assert frozen == first.invoice

    next_invoice = await operator.get_invoice(following.name, tenant_id="acme")
    assert next_invoice.lines == ()  # GPU-b is no longer held into it
    (adjustment,) = next_invoice.adjustments
    overbilled = us_to_seconds(closed.end_us - (t0 + 6 * HOUR_US))
    assert (adjustment.adjusted_period, adjustment.gpu_model, adjustment.gpu_seconds) == (
        closed.name,
        "H100",
        -overbilled,
    )
    assert adjustment.amount is not None
    assert adjustment.amount < 0
    assert next_invoice.total == next_invoice.adjustments_total == adjustment.amount
    (notice,) = [a for a in next_invoice.anomalies if a.kind == "LATE_AFTER_FINALIZATION"]
    assert notice.event_ids == (late["event_id"],)
    # Correcting the frozen invoice by hand gives what the period says today.
    assert first.invoice.total + adjustment.amount == _priced(overbilled, billed)

    # Once the following period is finalized with the correction, it is not carried again.
    carried = await operator.finalize_invoice(following.name, tenant_id="acme")
    assert carried.invoice.adjustments == next_invoice.adjustments
    assert await stored_counts(database_url, following) == {closed.name: 4, following.name: 4}
    later = await operator.get_invoice(following.next().name, tenant_id="acme")
    assert later.adjustments == ()
    assert later.total == 0


def _priced(overbilled: Decimal, billed: Decimal) -> Decimal:
    """The default card's H100 on-demand price (3.00/GPU-h) of what is billed once the late stop is known."""
    return ((billed - overbilled) * Decimal("3.00") / 3600).quantize(Decimal("0.01"))

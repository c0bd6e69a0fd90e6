"""Bounds on concurrent calls: one tenant cannot take the server from everyone.

Each tenant has a bound on its calls in flight, a smaller one on its long polls (WaitOperation)
and a smaller one still on heavy reads; the server as a whole has a bound on every caller's
calls together. Beyond a bound a call is answered at once with RESOURCE_EXHAUSTED, a stable
reason and a RetryInfo, never left to time out or be dropped as CANCELLED. Operators and agents
are not held to a tenant's bounds, so an operator's read stays fast while a tenant floods.
The bounds are lowered here so that a few dozen calls show what thousands would.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sqlite3
import statistics
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
import structlog
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2
from sqlalchemy import event
from sqlalchemy.engine import Engine

from clients import ResourceExhaustedError
from gpucloud.v1 import allocation_pb2, allocation_pb2_grpc, billing_pb2, billing_pb2_grpc, node_pb2, node_pb2_grpc
from services.server import StartError
from services.store import readers
from services.store.tx import Tx, run_on_connection
from tests.conftest import RunningControlPlane, register_ready_nodes, running_control_plane, until

# Long enough that no cancel completes during a test: every operation stays pending.
NEVER_SCRUBBED = 600.0

T = TypeVar("T")


@dataclass
class Outcome:
    """How one raw call ended: its code, ErrorInfo reason and RetryInfo delay (seconds), and when."""

    code: str
    reason: str = ""
    retry_delay: float | None = None
    seconds: float = 0.0


def outcome_of(error: grpc.aio.AioRpcError, seconds: float) -> Outcome:
    """The code, reason and retry delay a failed call carried in its status details."""
    reason, delay = "", None
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            for detail in status_pb2.Status.FromString(value).details:
                info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
                if detail.Unpack(info):
                    reason = info.reason
                elif detail.Unpack(retry):
                    delay = retry.retry_delay.ToTimedelta().total_seconds()
    return Outcome(error.code().name, reason, delay, seconds)


async def timed(call: Any) -> Outcome:
    """Await a raw gRPC call and say how it ended."""
    started = time.perf_counter()
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return outcome_of(error, time.perf_counter() - started)
    return Outcome("OK", seconds=time.perf_counter() - started)


class Raw:
    """Raw stubs on a channel of one caller's own, to see every status as the server sent it."""

    def __init__(self, channel: grpc.aio.Channel, token: str) -> None:
        self.metadata = (("authorization", f"Bearer {token}"),)
        # googleapis-common-protos ships this module without annotations.
        self.operations = operations_pb2_grpc.OperationsStub(channel)
        self.allocations = allocation_pb2_grpc.AllocationServiceStub(channel)
        self.nodes = node_pb2_grpc.NodeServiceStub(channel)
        self.billing = billing_pb2_grpc.BillingServiceStub(channel)

    def wait(self, name: str, *, seconds: float, deadline: float) -> Any:
        """WaitOperation for up to ``seconds``, with a call deadline of ``deadline`` seconds."""
        wait = Duration()
        wait.FromNanoseconds(int(seconds * 1e9))
        request = operations_pb2.WaitOperationRequest(name=name, timeout=wait)
        return self.operations.WaitOperation(request, metadata=self.metadata, timeout=deadline)

    def get_allocation(self, allocation_id: str) -> Any:
        request = allocation_pb2.GetAllocationRequest(allocation_id=allocation_id)
        return self.allocations.GetAllocation(request, metadata=self.metadata, timeout=10)

    def get_node(self, node_id: str, *, timeout: float = 10) -> Any:
        return self.nodes.GetNode(node_pb2.GetNodeRequest(node_id=node_id), metadata=self.metadata, timeout=timeout)

    def get_invoice(self, period: str) -> Any:
        request = billing_pb2.GetInvoiceRequest(period=period)
        return self.billing.GetInvoice(request, metadata=self.metadata, timeout=10)


@dataclass
class Setup:
    """A plane, a tenant with one pending operation (and its allocation), and a node to read."""

    plane: RunningControlPlane
    tenant_token: str
    allocation_id: str
    operation: str
    node_id: str


async def pending_operation(plane: RunningControlPlane, tenant_id: str = "acme") -> Setup:
    """Register a node, give it to a new tenant and cancel it: an operation that stays pending."""
    async with plane.client() as operator:
        [node_id] = await register_ready_nodes(operator, 1, prefix=f"{tenant_id}-node")
        created = await operator.create_tenant(tenant_id)
    async with plane.client(created.token) as tenant:
        allocation = await tenant.create_allocation(gpu_model="H100", node_count=1)
        operation = await tenant.cancel_allocation(allocation.allocation_id)
    assert not operation.done
    return Setup(plane, created.token, allocation.allocation_id, operation.name, node_id)


@pytest.fixture
async def limited(tmp_path: Path, database_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Setup]:
    """A plane with the bounds given by the test's parameter (ServerConfig overrides), and a pending operation."""
    overrides = getattr(request, "param", {})
    async with running_control_plane(
        tmp_path / "data", database_url, scrub_seconds=NEVER_SCRUBBED, **overrides
    ) as plane:
        yield await pending_operation(plane)


@contextmanager
def reads_of(table: str) -> Iterator[list[str]]:
    """The SQL statements that read ``table`` while the block runs: on SQLite as its reader
    threads run them (store/readers.py), on PostgreSQL as SQLAlchemy's engines do."""
    seen: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if f"FROM {table}" in statement:
            seen.append(statement)

    def noted(step: Tx[T]) -> Tx[T]:
        try:
            statement = next(step)
            while True:
                note(None, None, statement.text)
                statement = step.send((yield statement))
        except StopIteration as done:
            result: T = done.value
            return result

    run = run_on_connection

    def counted(connection: sqlite3.Connection, step: Tx[T]) -> T:
        return run(connection, noted(step))

    setattr(readers, "run_on_connection", counted)  # noqa: B010 (a spy on the real function)
    event.listen(Engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", note)
        setattr(readers, "run_on_connection", run)  # noqa: B010


@pytest.mark.parametrize("limited", [{"tenant_max_waits": 4}], indirect=True)
async def test_long_polls_beyond_a_tenants_bound_are_refused_with_retry_info(limited: Setup) -> None:
    """With a bound of 4 long polls, 4 + 3 at once: 3 are refused at once, 4 answer in time."""
    async with grpc.aio.insecure_channel(limited.plane.address) as channel:
        tenant = Raw(channel, limited.tenant_token)
        calls = [tenant.wait(limited.operation, seconds=1.0, deadline=3.0) for _ in range(7)]
        outcomes = await asyncio.gather(*(timed(c) for c in calls))
    refused = [o for o in outcomes if o.code != "OK"]
    assert len(refused) == 3, outcomes
    for o in refused:
        assert (o.code, o.reason) == ("RESOURCE_EXHAUSTED", "TOO_MANY_WAITS")
        assert o.retry_delay is not None
        assert o.retry_delay > 0
        assert o.seconds < 0.9  # refused at once, not after waiting
    assert sum(o.code == "OK" for o in outcomes) == 4


@pytest.mark.parametrize("limited", [{"tenant_max_calls": 4}], indirect=True)
async def test_a_tenant_at_its_bound_does_not_hold_up_others(limited: Setup) -> None:
    """A tenant whose 4 calls in flight fill its bound is refused a fifth; another tenant and the
    operator are served meanwhile, and the tenant is served again once its calls end."""
    other = await pending_operation(limited.plane, "globex")
    async with grpc.aio.insecure_channel(limited.plane.address) as channel:
        tenant = Raw(channel, limited.tenant_token)
        other_tenant = Raw(channel, other.tenant_token)
        operator = Raw(channel, limited.plane.operator_token)
        holding = [
            asyncio.ensure_future(timed(tenant.wait(limited.operation, seconds=1.5, deadline=5))) for _ in range(4)
        ]
        await until(lambda: limited.plane.plane.calls_in_flight >= 4)
        fifth = await timed(tenant.get_allocation(limited.allocation_id))
        assert (fifth.code, fifth.reason) == ("RESOURCE_EXHAUSTED", "TOO_MANY_CALLS"), fifth
        assert fifth.retry_delay is not None
        assert fifth.retry_delay > 0
        assert (await timed(other_tenant.get_allocation(other.allocation_id))).code == "OK"
        assert (await timed(operator.get_node(limited.node_id))).code == "OK"
        assert [o.code for o in await asyncio.gather(*holding)] == ["OK"] * 4
        assert (await timed(tenant.get_allocation(limited.allocation_id))).code == "OK"


@pytest.mark.parametrize(
    "limited", [{"tenant_max_calls": 8, "tenant_max_waits": 4, "tenant_max_heavy_calls": 1}], indirect=True
)
async def test_a_tenants_flood_is_answered_in_time_and_an_operators_read_stays_fast(limited: Setup) -> None:
    """A tenant's flood (long polls, and reads and invoices sent again as soon as answered): every
    call is answered before its deadline, OK or refused with RetryInfo, and an operator's GetNode
    on a connection of its own stays within a small multiple of its time on an idle server."""
    period = time.strftime("%Y-%m", time.gmtime())
    outcomes: list[Outcome] = []
    async with (
        grpc.aio.insecure_channel(limited.plane.address) as tenant_channel,
        grpc.aio.insecure_channel(limited.plane.address) as operator_channel,
    ):
        tenant = Raw(tenant_channel, limited.tenant_token)
        operator = Raw(operator_channel, limited.plane.operator_token)

        async def node_reads(count: int) -> list[float]:
            seconds = []
            for _ in range(count):
                outcome = await timed(operator.get_node(limited.node_id))
                assert outcome.code == "OK", outcome
                seconds.append(outcome.seconds)
            return seconds

        async def again_and_again(call: Any, until: asyncio.Event) -> None:
            # As a client that honours RetryInfo would: sent again once answered or after the delay.
            while not until.is_set():
                outcome = await timed(call())
                outcomes.append(outcome)
                # The delay the server asked for, cut short once the flood is over.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(until.wait(), outcome.retry_delay or 0)

        baseline = statistics.median(await node_reads(15))
        done = asyncio.Event()
        # A deadline well past the long poll's 1.5 s: a loaded machine answers a second late.
        waits = [timed(tenant.wait(limited.operation, seconds=1.5, deadline=4.0)) for _ in range(150)]
        reads = [again_and_again(lambda: tenant.get_allocation(limited.allocation_id), done) for _ in range(40)]
        invoices = [again_and_again(lambda: tenant.get_invoice(period), done) for _ in range(15)]
        flooding = asyncio.gather(*waits, *reads, *invoices)
        # The flood has arrived: the tenant's calls fill its bound.
        await until(lambda: limited.plane.plane.calls_in_flight >= 8)
        loaded = statistics.median(await node_reads(25))
        done.set()
        outcomes += [o for o in await flooding if o is not None]
    codes = Counter(o.code for o in outcomes)
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, codes
    for o in outcomes:
        if o.code == "RESOURCE_EXHAUSTED":
            assert o.retry_delay is not None, o
            assert o.retry_delay > 0, o
    assert codes["OK"] >= 8, codes
    # A ratio on the same machine in the same test, never an absolute time. The operator shares
    # the server with at most the tenant's bound of its calls in flight, so its read is slowed
    # by a bounded factor, whatever the size of the flood.
    assert loaded < 20 * baseline, (loaded, baseline)


async def test_waiters_share_database_reads(tmp_path: Path, database_url: str) -> None:
    """Many callers waiting on operations cost reads per change, not per waiter per tick: 40
    waiters for 1.5 s read the operations table about once each, plus a few shared re-reads."""
    async with running_control_plane(tmp_path / "data", database_url, scrub_seconds=NEVER_SCRUBBED) as plane:
        setup = await pending_operation(plane)
        waiters = 40
        async with grpc.aio.insecure_channel(plane.address) as channel:
            operator = Raw(channel, plane.operator_token)
            with reads_of("operations") as reads:
                outcomes = await asyncio.gather(
                    *(timed(operator.wait(setup.operation, seconds=1.5, deadline=5)) for _ in range(waiters))
                )
    assert [o.code for o in outcomes] == ["OK"] * waiters
    # One read each to answer NOT_FOUND or an already done operation, and shared re-reads
    # (twice a second at most) for all of them together; never one per waiter per re-read.
    assert len(reads) <= waiters + 10, len(reads)


async def test_one_completion_answers_every_waiter(tmp_path: Path, database_url: str) -> None:
    """When the operation completes, all of its waiters are answered with it done, at once."""
    async with running_control_plane(tmp_path / "data", database_url, scrub_seconds=0.5) as plane:
        setup = await pending_operation(plane)
        async with grpc.aio.insecure_channel(plane.address) as channel:
            tenant = Raw(channel, setup.tenant_token)
            calls = [tenant.wait(setup.operation, seconds=10, deadline=15) for _ in range(20)]
            answers = await asyncio.gather(*calls)
    assert {(a.name, a.done) for a in answers} == {(setup.operation, True)}
    assert all(a.response.type_url.endswith("gpucloud.v1.Allocation") for a in answers)


@pytest.mark.parametrize(
    "limited", [{"tenant_max_calls": 1000, "tenant_max_waits": 1000, "max_calls_in_flight": 10}], indirect=True
)
async def test_calls_beyond_the_servers_bound_are_refused_and_logged(limited: Setup) -> None:
    """Past the bound on all callers' calls together, a call is refused with RESOURCE_EXHAUSTED
    (SERVER_OVERLOADED) and RetryInfo and the server logs it; none is dropped as CANCELLED."""
    with structlog.testing.capture_logs() as logs:
        async with grpc.aio.insecure_channel(limited.plane.address) as channel:
            tenant = Raw(channel, limited.tenant_token)
            calls = [tenant.wait(limited.operation, seconds=1.0, deadline=3.0) for _ in range(40)]
            outcomes = await asyncio.gather(*(timed(c) for c in calls))
    codes = Counter((o.code, o.reason) for o in outcomes)
    assert codes == {("OK", ""): 10, ("RESOURCE_EXHAUSTED", "SERVER_OVERLOADED"): 30}, codes
    assert all(o.retry_delay for o in outcomes if o.code != "OK")
    refusals = [e for e in logs if e["event"] == "calls_refused"]
    assert refusals, logs[-5:]
    assert refusals[0]["reason"] == "SERVER_OVERLOADED", logs[-5:]


async def test_a_burst_past_grpcs_pending_queue_is_served_not_cancelled(tmp_path: Path, database_url: str) -> None:
    """gRPC's queue of calls not yet handed to the server's code is sized from the server's
    bound, not left at gRPC's default (which cancels calls past 1,000 queued, unlogged): a burst
    of 1,500 reads within the server's bound is all answered (the server's bounds, which answer
    and log, decide what is refused; not gRPC's queue)."""
    async with running_control_plane(tmp_path / "data", database_url, max_calls_in_flight=10_000) as plane:
        async with plane.client() as operator:
            [node_id] = await register_ready_nodes(operator, 1)
        async with grpc.aio.insecure_channel(plane.address) as channel:
            raw = Raw(channel, plane.operator_token)
            # Time enough to answer them all on a slow machine: the test is about gRPC's queue
            # cancelling none, not how fast the server reads.
            outcomes = await asyncio.gather(*(timed(raw.get_node(node_id, timeout=120)) for _ in range(1500)))
    codes = Counter(o.code for o in outcomes)
    assert codes == {"OK": 1500}, codes


@pytest.mark.parametrize("limited", [{"tenant_max_calls": 2}], indirect=True)
async def test_the_client_sends_a_refused_call_again_after_the_advised_delay(limited: Setup) -> None:
    """A refusal at a bound says the call was not run and when to come back: the client waits
    that long and tries again within the call's deadline, for any call, and gives up with
    ResourceExhaustedError when the deadline leaves no time for it."""
    async with (
        grpc.aio.insecure_channel(limited.plane.address) as channel,
        limited.plane.client(limited.tenant_token) as client,
    ):
        tenant = Raw(channel, limited.tenant_token)
        holding = [
            asyncio.ensure_future(timed(tenant.wait(limited.operation, seconds=0.5, deadline=5))) for _ in range(2)
        ]
        await until(lambda: limited.plane.plane.calls_in_flight >= 2)
        with pytest.raises(ResourceExhaustedError) as refused:
            await client.get_allocation(limited.allocation_id, timeout=0.5)
        assert refused.value.reason == "TOO_MANY_CALLS"
        with structlog.testing.capture_logs() as logs:
            allocation = await client.get_allocation(limited.allocation_id, timeout=5)
        assert allocation.allocation_id == limited.allocation_id
        assert [o.code for o in await asyncio.gather(*holding)] == ["OK", "OK"]
    tries = [e["code"] for e in logs if e["event"] == "rpc" and e["method"].endswith("/GetAllocation")]
    # Refused while the two waits hold the tenant's calls, then sent again after each advised
    # delay until they end: on a loaded machine the waits may outlast the first delay.
    assert len(tries) >= 2, tries
    assert tries[-1] == "OK"
    assert all(code == "RESOURCE_EXHAUSTED" for code in tries[:-1]), tries


async def test_a_bound_under_one_fails_the_start(tmp_path: Path, database_url: str) -> None:
    """A bound of 0 would refuse every call: the server says so instead of starting."""
    with pytest.raises(StartError, match="tenant_waits must be at least 1"):
        async with running_control_plane(tmp_path / "data", database_url, tenant_max_waits=0):
            pass


@pytest.mark.parametrize("limited", [{"max_calls_in_flight": 1}], indirect=True)
async def test_calls_with_unknown_tokens_count_against_the_servers_bound(limited: Setup) -> None:
    """A call is counted from its arrival, before its token is looked up: a flood of well-formed
    tokens that exist nowhere meets the server's bound like any other flood, and what is past it
    is refused SERVER_OVERLOADED without a database read."""
    with reads_of("api_tokens") as reads:
        async with grpc.aio.insecure_channel(limited.plane.address) as channel:
            strangers = [Raw(channel, f"gpc_{secrets.token_hex(8)}_x") for _ in range(300)]
            outcomes = await asyncio.gather(*(timed(s.get_node(limited.node_id)) for s in strangers))
    codes = Counter((o.code, o.reason) for o in outcomes)
    assert set(codes) == {("UNAUTHENTICATED", "INVALID_TOKEN"), ("RESOURCE_EXHAUSTED", "SERVER_OVERLOADED")}, codes
    assert all(o.retry_delay for o in outcomes if o.code == "RESOURCE_EXHAUSTED")
    # One lookup per call that was let in; none for a call refused on arrival.
    assert len(reads) == codes[("UNAUTHENTICATED", "INVALID_TOKEN")], (len(reads), codes)


async def test_one_nodes_agent_is_held_to_its_own_bound(tmp_path: Path, database_url: str) -> None:
    """An agent's calls are bounded per node, as a tenant's are per tenant: a burst from one
    node's agent past its bound is refused TOO_MANY_CALLS (not run), while another node's agent
    is served."""
    async with running_control_plane(tmp_path / "data", database_url, agent_max_calls=2) as plane:
        async with plane.client() as operator:
            busy_node, quiet_node = await register_ready_nodes(operator, 2)
            busy_token = (await operator.create_agent_token(busy_node)).token
            quiet_token = (await operator.create_agent_token(quiet_node)).token
        async with grpc.aio.insecure_channel(plane.address) as channel:
            busy, quiet = Raw(channel, busy_token), Raw(channel, quiet_token)
            assert (await timed(busy.get_node(busy_node))).code == "OK"  # its token is known now
            burst = [timed(busy.get_node(busy_node)) for _ in range(60)]
            outcomes = await asyncio.gather(*burst, timed(quiet.get_node(quiet_node)))
    *busy_outcomes, quiet_outcome = outcomes
    codes = Counter((o.code, o.reason) for o in busy_outcomes)
    assert set(codes) == {("OK", ""), ("RESOURCE_EXHAUSTED", "TOO_MANY_CALLS")}, codes
    assert all(o.retry_delay for o in busy_outcomes if o.code != "OK")
    assert quiet_outcome.code == "OK", quiet_outcome


async def test_a_burst_past_grpcs_queue_is_refused_before_the_server_sees_it(tmp_path: Path, database_url: str) -> None:
    """gRPC's queue of calls not yet handed to the server's code is bounded (a multiple of the
    server's bound, and at least gRPC's defaults of 1,000 and 3,000), so that a burst cannot hold
    unbounded memory: a burst far past it is partly refused by gRPC (CANCELLED, not run), and
    the rest answered by the server's bounds."""
    async with running_control_plane(tmp_path / "data", database_url, max_calls_in_flight=10) as plane:
        async with plane.client() as operator:
            [node_id] = await register_ready_nodes(operator, 1)
        async with grpc.aio.insecure_channel(plane.address) as channel:
            raw = Raw(channel, plane.operator_token)
            # A deadline the queue drains within on a slow machine: a call that waited out a
            # short one in gRPC's queue says how fast the machine is, not how the queue is bounded.
            calls = (timed(raw.get_node(node_id, timeout=120)) for _ in range(4000))
            outcomes = await asyncio.gather(*calls)
    codes = Counter(o.code for o in outcomes)
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED", "CANCELLED"}, codes
    assert codes["OK"] > 0, codes
    assert codes["CANCELLED"] > 0, codes

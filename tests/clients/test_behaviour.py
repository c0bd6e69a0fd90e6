"""What the Python client promises its callers: request ids on errors, retries until the deadline,
a ``timeout=`` on every method, one rule for time arguments, every type importable from
``clients``, a client that survives a second event loop, and a README example that runs.

Real control planes on loopback where a healthy server can show it; a scripted gRPC server where
only a failing one can (UNAVAILABLE on every try, no answer at all)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import inspect
import math
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2

import clients
from clients import (
    AsyncClient,
    Client,
    CreatedTenant,
    DeadlineExceededError,
    InvalidValueError,
    NodeSamples,
    ResourceExhaustedError,
    RetryPolicy,
    UnavailableError,
    billing,
    errors,
    metrics,
    models,
)
from clients.instants import Instant, duration_ms, from_ms, to_ms, to_timestamp
from gpucloud.v1 import allocation_pb2
from tests.clients.scripted_server import Behaviour, Start, serve
from tests.conftest import RunningControlPlane, register_ready_nodes

CREATE = "gpucloud.v1.AllocationService/CreateAllocation"
CREATE_TENANT = "gpucloud.v1.TenantService/CreateTenant"
GET_NODE = "gpucloud.v1.NodeService/GetNode"
LIST_NODES = "gpucloud.v1.NodeService/ListNodes"
FAST = RetryPolicy(initial_backoff=0.001, max_backoff=0.002)
README = Path(__file__).resolve().parents[2] / "README.md"


def _unavailable_until(tries: int | None) -> tuple[Behaviour, list[bytes]]:
    """UNAVAILABLE for the first ``tries`` requests (None: always), then an empty answer; and the requests seen."""
    seen: list[bytes] = []

    async def behaviour(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        seen.append(request)
        if tries is None or len(seen) <= tries:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: database restarting")
        return empty_pb2.Empty().SerializeToString()

    return behaviour, seen


def _hanging() -> tuple[Behaviour, list[bytes]]:
    """A behaviour that never answers, and the requests it saw."""
    seen: list[bytes] = []
    never = asyncio.Event()

    async def behaviour(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        seen.append(request)
        await never.wait()
        return b""

    return behaviour, seen


def _request_ids(seen: list[bytes]) -> list[str]:
    return [allocation_pb2.CreateAllocationRequest.FromString(r).request_id for r in seen]


# 1. A failed create carries its request_id ------------------------------------------------


async def test_a_create_that_timed_out_carries_its_automatic_request_id(scripted: Start) -> None:
    behaviour, seen = _hanging()
    async with AsyncClient(await scripted({CREATE: behaviour}), "token") as client:
        with pytest.raises(DeadlineExceededError) as caught:
            await client.create_allocation(gpu_model="H100", node_count=1, timeout=0.2)
    assert _request_ids(seen) == [caught.value.request_id]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", _request_ids(seen)[0])
    assert caught.value.message == "CreateAllocation: no answer within 0.2 s"


async def test_a_create_that_stayed_unavailable_carries_the_request_id_every_try_sent(scripted: Start) -> None:
    behaviour, seen = _unavailable_until(None)
    # The last try starts with what is left of the deadline; on a loaded machine that sliver can
    # run out before the answer, so the call ends UNAVAILABLE or DEADLINE_EXCEEDED: either way
    # the outcome is unknown, and either error carries the key.
    unknown_outcome = (UnavailableError, DeadlineExceededError)
    async with AsyncClient(await scripted({CREATE: behaviour}), "token", retry=FAST) as client:
        with pytest.raises(unknown_outcome) as caught:
            await client.create_allocation(gpu_model="H100", node_count=1, timeout=0.3)
        # The caller's retry with the error's key sends the same key again.
        with pytest.raises(unknown_outcome) as again:
            await client.create_allocation(
                gpu_model="H100", node_count=1, request_id=caught.value.request_id, timeout=0.1
            )
    ids = _request_ids(seen)
    assert len(ids) > 2
    assert set(ids) == {caught.value.request_id} == {again.value.request_id}


async def test_retrying_with_the_errors_request_id_returns_one_allocation(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Against the real server: the refused create's key, sent again, makes the allocation once."""
    await register_ready_nodes(operator, 1)
    await operator.create_tenant("acme")
    create = functools.partial(
        operator.create_allocation, gpu_model="H100", node_count=2, tenant_id="acme", fail_if_unavailable=True
    )
    with pytest.raises(ResourceExhaustedError) as caught:
        await create()
    key = caught.value.request_id
    assert key
    await register_ready_nodes(operator, 1, prefix="more")
    first = await create(request_id=key)
    replay = await create(request_id=key)
    assert replay.allocation_id == first.allocation_id
    assert len([a async for a in operator.iter_allocations(tenant_id="acme")]) == 1


async def test_an_error_of_a_call_without_a_key_has_no_request_id(operator: AsyncClient) -> None:
    with pytest.raises(clients.NotFoundError) as caught:
        await operator.get_node("no-such-node")
    assert caught.value.request_id is None


# 2. Retries follow the deadline ---------------------------------------------------------------


async def test_unavailable_is_retried_past_six_tries_until_it_succeeds(scripted: Start) -> None:
    """The old policy gave up after 6 tries whatever the deadline; the default now follows the deadline."""
    behaviour, seen = _unavailable_until(20)
    async with AsyncClient(await scripted({CREATE: behaviour}), "token", retry=FAST) as client:
        await client.create_allocation(gpu_model="H100", node_count=1, timeout=20)
    ids = _request_ids(seen)
    assert len(ids) == 21
    assert len(set(ids)) == 1  # every retry reuses the one key


async def test_unavailable_is_retried_until_the_deadline_then_raised(scripted: Start) -> None:
    behaviour, seen = _unavailable_until(None)
    policy = RetryPolicy(initial_backoff=0.01, max_backoff=0.05)
    async with AsyncClient(await scripted({GET_NODE: behaviour}), "token", retry=policy) as client:
        started = time.monotonic()
        # UNAVAILABLE, or DEADLINE_EXCEEDED when the last try's sliver of the deadline ran out
        # first on a loaded machine (as in the request-id test above).
        with pytest.raises((UnavailableError, DeadlineExceededError)) as caught:
            await client.get_node("node-1", timeout=1.0)
        took = time.monotonic() - started
    assert isinstance(caught.value, DeadlineExceededError) or "database restarting" in str(caught.value)
    # It stops only when the next back-off (at most 0.05 s) would pass the deadline.
    assert 1.0 - 0.05 <= took < 5
    assert len(seen) > 6


async def test_a_policy_with_attempts_still_bounds_the_tries(scripted: Start) -> None:
    behaviour, seen = _unavailable_until(None)
    policy = RetryPolicy(attempts=3, initial_backoff=0.001, max_backoff=0.001)
    async with AsyncClient(await scripted({GET_NODE: behaviour}), "token", retry=policy) as client:
        with pytest.raises(UnavailableError):
            await client.get_node("node-1", timeout=20)
    assert len(seen) == 3


async def test_a_create_tenant_is_never_retried(scripted: Start) -> None:
    """The first try may have made the tenant: a retry would find it taken."""
    behaviour, seen = _unavailable_until(None)
    async with AsyncClient(await scripted({CREATE_TENANT: behaviour}), "token", retry=FAST) as client:
        with pytest.raises(UnavailableError):
            await client.create_tenant("acme", timeout=5)
    assert len(seen) == 1


def test_back_off_stays_capped_however_many_retries() -> None:
    policy = RetryPolicy()
    assert policy.attempts is None
    assert max(policy.delay(5000) for _ in range(1000)) <= policy.max_backoff <= 2.0
    with pytest.raises(InvalidValueError):
        RetryPolicy(attempts=0)


@dataclasses.dataclass(frozen=True)
class _Signalling(RetryPolicy):
    """The default back-off, setting ``reached`` once the client is about to make try ``after + 1``."""

    after: int = 8
    reached: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def delay(self, retry: int) -> float:
        if retry >= self.after:
            self.reached.set()
        return super().delay(retry)


async def test_a_server_down_for_more_tries_than_the_old_limit_fails_no_safe_call() -> None:
    """No server at all for 8 tries (about 2 s of default back-off, past the old 6 tries and 1.5 s),
    then a server on the same port: the call, still within its deadline, succeeds."""
    answered, _ = _unavailable_until(0)
    server, port = await serve({GET_NODE: answered})
    policy = _Signalling()
    async with AsyncClient(f"127.0.0.1:{port}", "token", retry=policy) as client:
        await client.get_node("node-1")
        await server.stop(None)
        call = asyncio.create_task(client.get_node("node-1", timeout=30))
        reached = asyncio.create_task(policy.reached.wait())
        await asyncio.wait({call, reached}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        assert reached.done()
        assert not call.done()
        server, _ = await serve({GET_NODE: answered}, port)
        try:
            node = await asyncio.wait_for(call, 30)
        finally:
            await server.stop(None)
    assert node.node_id == ""  # the scripted server's empty answer


# 3 and 4. Deadlines -------------------------------------------------------------------------


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_every_method_of_both_clients_takes_a_timeout_with_the_same_signature() -> None:
    async_methods = _public_methods(AsyncClient)
    sync_methods = _public_methods(Client)
    assert set(sync_methods) == set(async_methods) - {"iter_usage_event_pages"}
    for name, signature in async_methods.items():
        if name == "close":
            continue
        timeout = signature.parameters.get("timeout")
        assert timeout is not None, name
        assert timeout.kind is inspect.Parameter.KEYWORD_ONLY, name
        if name in sync_methods:
            assert list(sync_methods[name].parameters.values()) == list(signature.parameters.values()), name


async def test_a_calls_timeout_overrides_the_clients_and_the_error_names_method_and_deadline(
    scripted: Start,
) -> None:
    behaviour, seen = _hanging()
    address = await scripted({GET_NODE: behaviour, LIST_NODES: behaviour})
    async with AsyncClient(address, "token", timeout=30) as client:
        with pytest.raises(DeadlineExceededError) as caught:
            await asyncio.wait_for(client.get_node("node-1", timeout=0.2), 10)
    assert caught.value.message == "GetNode: no answer within 0.2 s"
    assert caught.value.request_id is None

    def blocking() -> DeadlineExceededError:
        with Client(address, "token", timeout=0.3) as sync_client:
            with pytest.raises(DeadlineExceededError) as caught:
                sync_client.list_nodes()
            return caught.value

    assert (await asyncio.to_thread(blocking)).message == "ListNodes: no answer within 0.3 s"
    assert len(seen) == 2


@pytest.mark.parametrize("timeout", [0, -1, 0.0, math.nan, math.inf, True, "30"])
def test_a_client_timeout_that_is_not_a_positive_number_is_refused(timeout: Any) -> None:
    """Refused at construction, naming ``timeout`` (``Any``: these are the values a caller's
    types would not let through, sent anyway)."""
    threads = threading.active_count()
    for cls in (AsyncClient, Client):
        with pytest.raises(InvalidValueError, match="timeout") as caught:
            cls("127.0.0.1:1", "token", timeout=timeout)
        assert caught.value.field == "timeout"
    assert threading.active_count() == threads  # the refused Client started no loop thread


async def test_a_negative_call_timeout_is_refused_before_calling(scripted: Start) -> None:
    behaviour, seen = _hanging()
    async with AsyncClient(await scripted({GET_NODE: behaviour}), "token") as client:
        with pytest.raises(InvalidValueError) as caught:
            await client.get_node("node-1", timeout=-1)
    assert caught.value.field == "timeout"
    assert seen == []


# 5. Time arguments ----------------------------------------------------------------------------


@pytest.fixture
def far_from_utc() -> Iterator[None]:
    """The process's local zone 5:30 ahead of UTC, so that a naive time read as local would miss."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "IST-5:30"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_every_time_argument_follows_one_rule() -> None:
    aware = datetime(2026, 1, 1, 12, 0, 0, 123000, tzinfo=UTC)
    naive = aware.replace(tzinfo=None)
    ms = 1_767_268_800_123
    assert to_ms(aware, "start") == to_ms(naive, "start") == to_ms(ms, "start") == ms
    assert to_timestamp(aware, "start_time") == to_timestamp(naive, "start_time") == to_timestamp(ms, "start_time")
    assert to_timestamp(-1, "start_time") == to_timestamp(datetime(1969, 12, 31, 23, 59, 59, 999000), "x")
    assert duration_ms(timedelta(seconds=5), "step") == duration_ms(5000, "step") == 5000
    for bad in (1.5e12, "2026-01-01", True, None, 2**63):
        with pytest.raises(InvalidValueError) as caught:
            to_ms(bad, "start")
        assert caught.value.field == "start"
    with pytest.raises(InvalidValueError):
        duration_ms(1.5, "step")


async def test_naive_datetimes_are_utc_for_usage_events_and_metrics(
    control_plane: RunningControlPlane, operator: AsyncClient, far_from_utc: None
) -> None:
    await register_ready_nodes(operator, 1)
    await operator.create_tenant("acme")
    await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    events = (await operator.list_usage_events(tenant_id="acme")).items
    assert events
    at = events[0].event_time
    assert at is not None

    async def event_ids(start: Instant) -> list[str]:
        page = await operator.list_usage_events(tenant_id="acme", start_time=start)
        return [e.event_id for e in page]

    every = [e.event_id for e in events]
    at_ms = to_ms(at, "at")
    assert await event_ids(at) == await event_ids(at.replace(tzinfo=None)) == await event_ids(at_ms) == every
    # Read as local time (5:30 ahead), an hour later would be hours earlier and find the events.
    assert await event_ids((at + timedelta(hours=1)).replace(tzinfo=None)) == []

    now_ms = int(time.time() * 1000) - 1000
    await operator.write_samples([NodeSamples("node-000", now_ms, {0: {"power_w": 300.0}})])
    naive_start = from_ms(now_ms).replace(tzinfo=None)
    by_naive = await operator.query_metrics(start=naive_start, end=naive_start + timedelta(seconds=1))
    by_ms = await operator.query_metrics(start=now_ms, end=now_ms + 1000)
    assert [s.timestamps_ms.tolist() for s in by_naive.series] == [[now_ms]]
    assert [s.timestamps_ms.tolist() for s in by_ms.series] == [[now_ms]]


async def test_a_float_or_string_time_is_refused_naming_the_parameter(operator: AsyncClient) -> None:
    # Typed Any: the values a caller's types would not let through, sent anyway.
    float_ms: Any = time.time() * 1000
    text: Any = "2026-01-01"
    half_ms: Any = 0.5
    with pytest.raises(InvalidValueError) as caught:
        await operator.query_metrics(start=float_ms, end=int(time.time() * 1000))
    assert caught.value.field == "start"
    with pytest.raises(InvalidValueError) as caught:
        await operator.list_usage_events(end_time=text)
    assert caught.value.field == "end_time"
    with pytest.raises(InvalidValueError) as caught:
        await operator.query_metrics_range(start=0, end=1000, step=half_ms)
    assert caught.value.field == "step"


# 6. Exports -----------------------------------------------------------------------------------


def test_every_public_type_imports_from_clients() -> None:
    from clients import InvalidValueError, InvoiceReconciliation, MetricsResult, SeriesSamples, WriteResult  # noqa: F401

    public = {
        name
        for module in (models, metrics, billing, errors)
        for name, member in vars(module).items()
        if inspect.isclass(member) and member.__module__ == module.__name__ and not name.startswith("_")
    }
    public |= {"AsyncClient", "Client", "CreatedTenant", "RetryPolicy"}
    assert public <= set(clients.__all__)
    assert clients.__all__ == sorted(clients.__all__)
    assert all(hasattr(clients, name) for name in clients.__all__)
    assert clients.CreatedTenant is CreatedTenant


# 7. A second event loop -----------------------------------------------------------------------


async def test_an_async_client_works_again_in_a_second_event_loop(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 1)
    client = AsyncClient(control_plane.address, control_plane.operator_token, timeout=15)

    def two_runs() -> list[str]:
        first = asyncio.run(client.get_node("node-000"))
        second = asyncio.run(client.get_node("node-000"))

        async def last() -> str:
            node = await client.get_node("node-000")
            await client.close()
            return node.state

        return [first.state, second.state, asyncio.run(last())]

    assert await asyncio.to_thread(two_runs) == ["READY"] * 3


# 8. The README example ------------------------------------------------------------------------


def _readme_python_example() -> str:
    section = README.read_text().split("## From Python\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1
    return str(blocks[0])


async def test_the_readme_python_example_runs_as_written(control_plane: RunningControlPlane) -> None:
    """Against a fresh control plane, with only its address and token file swapped in."""
    source = _readme_python_example()
    assert '"127.0.0.1:50051"' in source
    assert 'Path("data/operator.token")' in source
    source = source.replace('"127.0.0.1:50051"', repr(control_plane.address))
    source = source.replace('Path("data/operator.token")', f"Path({str(control_plane.plane.operator_token_path)!r})")
    namespace: dict[str, object] = {}
    await asyncio.to_thread(exec, compile(source, "README.md", "exec"), namespace)

    operation = namespace["operation"]
    allocation = namespace["allocation"]
    assert isinstance(operation, models.Operation)
    assert operation.done
    assert isinstance(allocation, models.Allocation)
    assert allocation.tenant_id == "acme"
    async with control_plane.client() as operator:
        after = await operator.get_allocation(allocation.allocation_id)
        assert after.state == "CANCELLED"
        assert [n.state for n in await operator.list_nodes()] == ["READY", "READY"]


# The blocking Client's thread and calls ------------------------------------------------------


class _ServerThread:
    """A scripted server on an event loop of its own thread, for tests whose main thread blocks."""

    def __init__(self, methods: dict[str, Behaviour]) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.server, port = asyncio.run_coroutine_threadsafe(serve(methods), self.loop).result(timeout=30)
        self.address = f"127.0.0.1:{port}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def test_an_interrupted_blocking_call_is_cancelled_not_left_running() -> None:
    """Ctrl-C while a Client call waits: the call stops on the client's loop too (a create left
    there would go on retrying behind the user's back)."""

    async def interrupt_when_called(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        # Ctrl-C's SIGINT, to the main thread blocked in the call (a signal wakes its wait).
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        await asyncio.Event().wait()
        return b""

    served = _ServerThread({GET_NODE: interrupt_when_called})
    client = Client(served.address, "token")
    try:
        with pytest.raises(KeyboardInterrupt):
            client.get_node("n0")

        async def others_when_finished() -> list[asyncio.Task[Any]]:
            others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            await asyncio.gather(*others, return_exceptions=True)
            return others

        # Before the fix the call's task hung on the server: this timed out.
        others = asyncio.run_coroutine_threadsafe(others_when_finished(), client._loop).result(timeout=10)
        assert all(task.cancelled() for task in others)
    finally:
        client.close()
        served.close()


def test_a_blocking_client_dropped_unclosed_stops_its_thread() -> None:
    client = Client("127.0.0.1:1", "token")
    thread = client._thread
    assert thread.is_alive()
    del client
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()


def _dropped_client(address: str) -> tuple[AsyncClient, asyncio.AbstractEventLoop, threading.Thread, Any]:
    """A Client that made one call (its channel is open), dropped without close(): its AsyncClient,
    loop, thread and channel; and, last, the Client itself in a list, the only reference left."""
    client = Client(address, "token")
    client.list_nodes()
    stubs = client._async._channel_stubs
    assert stubs is not None
    return client._async, client._loop, client._thread, (stubs.channel, [client])


@pytest.mark.parametrize("on_its_own_loop", [False, True])
def test_a_blocking_client_dropped_unclosed_closes_its_channel_and_loop(on_its_own_loop: bool) -> None:
    """The finalizer stopped the loop thread but left the gRPC channel open; and when the last
    reference went in a callback on the client's own loop thread (where the finalizer cannot
    wait for the loop), it returned early, leaving the loop unclosed."""
    served = _ServerThread({LIST_NODES: _unavailable_until(0)[0]})
    try:
        inner, loop, thread, (channel, holder) = _dropped_client(served.address)
        if on_its_own_loop:
            loop.call_soon_threadsafe(holder.clear)
        else:
            holder.clear()
            gc.collect()
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert loop.is_closed()
        assert inner._channel_stubs is None
        assert channel.get_state() is grpc.ChannelConnectivity.SHUTDOWN
    finally:
        served.close()

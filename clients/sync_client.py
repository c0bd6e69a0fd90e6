"""``Client``: the blocking twin of ``AsyncClient`` for scripts and notebooks.

It runs an ``AsyncClient`` on a private event loop in a daemon thread, so it works the same
inside and outside programs that already run an event loop, and shares every behaviour of the
async client (deadlines, retries, automatic request ids, error types), except that a closed
``Client`` stays closed: make a new one.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterator, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from clients import billing, instants, metrics, models
from clients.async_client import (
    DEFAULT_MAX_RECEIVE_BYTES,
    DEFAULT_TIMEOUT,
    AsyncClient,
    CreatedTenant,
    RetryPolicy,
    next_page_token,
)

T = TypeVar("T")


def _pages(fetch: Callable[[str], models.Page[T]], token: str) -> Iterator[models.Page[T]]:
    """Every page of a listing, from ``token``'s on ("" for the first)."""
    while True:
        page = fetch(token)
        yield page
        token = next_page_token(page, token)
        if not token:
            return


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The loop thread: run ``loop`` until it is stopped, then close it (on this thread, so that a
    loop stopped from one of its own callbacks is closed too, once ``run_forever`` has returned)."""
    try:
        loop.run_forever()
    finally:
        loop.close()


# How long closing a client waits for its channel to close before it stops the loop anyway.
_CLOSE_WAIT = 5.0


def _stop(loop: asyncio.AbstractEventLoop, thread: threading.Thread, client: AsyncClient) -> None:
    """Close a client's channel, then stop its loop thread; the thread closes the loop. Runs once
    (a finalizer runs at most once), from ``Client.close()`` or when a dropped Client is collected:
    it holds the loop, thread and ``AsyncClient``, never the Client, or it would keep it alive."""
    if loop.is_closed():
        return
    if thread is threading.current_thread():
        # Collected on its own loop, in one of its callbacks: the loop cannot wait for itself.
        # Close the channel in a task and stop the loop after it; _run_loop then closes the loop.
        if loop.is_running():
            task = loop.create_task(client.close())
            task.add_done_callback(lambda _: loop.stop())
        return
    if thread.is_alive():
        closing = asyncio.run_coroutine_threadsafe(client.close(), loop)
        try:
            closing.result(timeout=_CLOSE_WAIT)
        except BaseException as error:
            # Not closed in time, failed or interrupted: the loop stops all the same, and
            # dropping the channel lets garbage collection release it.
            closing.cancel()
            if not isinstance(error, Exception):
                raise
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()


class Client:
    """Blocking client. Use as ``with Client(addr, token) as client``.

    Every method takes ``timeout=`` as ``AsyncClient``'s does: the seconds its call may take, retries included.
    """

    def __init__(
        self,
        address: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        max_receive_bytes: int = DEFAULT_MAX_RECEIVE_BYTES,
    ) -> None:
        """Start the client's event-loop thread; ``timeout``, ``retry`` and ``max_receive_bytes`` are as for
        ``AsyncClient``."""
        # First, so that a bad timeout leaves no thread behind.
        self._async = AsyncClient(address, token, timeout=timeout, retry=retry, max_receive_bytes=max_receive_bytes)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=_run_loop, args=(self._loop,), name="gpucloud-client", daemon=True)
        self._thread.start()
        # A Client dropped without close() closes its channel and stops its thread when collected
        # (or at exit); the callback holds the loop, thread and AsyncClient, never the Client.
        self._stop_when_collected = weakref.finalize(self, _stop, self._loop, self._thread, self._async)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the client's loop and wait for its result. Interrupted (Ctrl-C),
        the call is cancelled on the loop too, not left running there: a create would retry on."""
        if self._loop.is_closed():
            coroutine.close()  # never to run: no "never awaited" warning
            raise RuntimeError("this Client is closed; make a new one")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Close the channel and stop the loop thread. Safe to call twice; the client cannot be used after."""
        self._stop_when_collected()

    def __enter__(self) -> Client:
        """The client itself."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the client."""
        self.close()

    def create_tenant(self, tenant_id: str, display_name: str = "", *, timeout: float | None = None) -> CreatedTenant:
        """Create a tenant and its first API token (operators). Not retried; a taken id is ``AlreadyExistsError``."""
        return self._run(self._async.create_tenant(tenant_id, display_name, timeout=timeout))

    def get_tenant(self, tenant_id: str, *, timeout: float | None = None) -> models.Tenant:
        """The tenant ``tenant_id``. A tenant may read only itself: any other id is ``NotFoundError``."""
        return self._run(self._async.get_tenant(tenant_id, timeout=timeout))

    def list_tenants(
        self, *, page_size: int = 0, page_token: str = "", timeout: float | None = None
    ) -> models.Page[models.Tenant]:
        """One page of every tenant, ordered by id (operators)."""
        return self._run(self._async.list_tenants(page_size=page_size, page_token=page_token, timeout=timeout))

    def create_tenant_token(self, tenant_id: str, *, timeout: float | None = None) -> models.CreatedToken:
        """Issue another API token for a tenant, for rotation (operators); old tokens stay valid until revoked
        (``list_tokens(tenant_id=...)`` shows their ids). Not retried."""
        return self._run(self._async.create_tenant_token(tenant_id, timeout=timeout))

    def create_agent_token(self, node_id: str, *, timeout: float | None = None) -> models.CreatedToken:
        """Mint an agent token bound to ``node_id`` (operators), shown only once; the node need not be registered
        yet. Not retried."""
        return self._run(self._async.create_agent_token(node_id, timeout=timeout))

    def create_operator_token(self, *, timeout: float | None = None) -> models.CreatedToken:
        """Mint another operator token (operators), shown only once, for rotation. Not retried."""
        return self._run(self._async.create_operator_token(timeout=timeout))

    def list_tokens(
        self,
        *,
        tenant_id: str = "",
        node_id: str = "",
        role: str | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> models.Page[models.ApiToken]:
        """One page of API tokens, newest first, never with their secrets (operators); ``tenant_id``, ``node_id``
        and ``role`` filter it."""
        return self._run(
            self._async.list_tokens(
                tenant_id=tenant_id,
                node_id=node_id,
                role=role,
                page_size=page_size,
                page_token=page_token,
                timeout=timeout,
            )
        )

    def iter_tokens(
        self,
        *,
        tenant_id: str = "",
        node_id: str = "",
        role: str | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> Iterator[models.ApiToken]:
        """Every API token the filters keep, newest first, fetching pages as needed; from ``page_token``'s page
        on when one is given. ``timeout`` bounds each page's call."""
        for page in _pages(
            lambda token: self.list_tokens(
                tenant_id=tenant_id,
                node_id=node_id,
                role=role,
                page_size=page_size,
                page_token=token,
                timeout=timeout,
            ),
            page_token,
        ):
            yield from page

    def revoke_token(self, token_id: str, *, timeout: float | None = None) -> models.ApiToken:
        """Revoke a token (operators); idempotent, so retried. The last operator token that is not revoked is
        ``FailedPreconditionError``."""
        return self._run(self._async.revoke_token(token_id, timeout=timeout))

    def register_node(
        self,
        node_id: str,
        *,
        gpu_model: str,
        gpu_uuids: Sequence[str],
        zone: str,
        rack: str,
        leaf_switch: str,
        timeout: float | None = None,
    ) -> models.Node:
        """Register a node whose GPUs are ``gpu_uuids`` in index order. Safe to repeat."""
        return self._run(
            self._async.register_node(
                node_id,
                gpu_model=gpu_model,
                gpu_uuids=gpu_uuids,
                zone=zone,
                rack=rack,
                leaf_switch=leaf_switch,
                timeout=timeout,
            )
        )

    def get_node(self, node_id: str, *, timeout: float | None = None) -> models.Node:
        """The node ``node_id`` (operators and agents; an agent reading another node is ``PermissionDeniedError``)."""
        return self._run(self._async.get_node(node_id, timeout=timeout))

    def list_nodes(
        self,
        *,
        state: str | None = None,
        gpu_model: str | None = None,
        zone: str = "",
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> models.Page[models.Node]:
        """One page of the fleet, ordered by node id (operators). ``state``, ``gpu_model`` and ``zone`` filter it."""
        return self._run(
            self._async.list_nodes(
                state=state,
                gpu_model=gpu_model,
                zone=zone,
                page_size=page_size,
                page_token=page_token,
                timeout=timeout,
            )
        )

    def complete_burn_in(
        self, node_id: str, *, passed: bool = True, detail: str = "", timeout: float | None = None
    ) -> models.Node:
        """Record a burn-in result: passed -> READY, failed -> QUARANTINED. Not retried."""
        return self._run(self._async.complete_burn_in(node_id, passed=passed, detail=detail, timeout=timeout))

    def cordon_node(self, node_id: str, reason: str = "", *, timeout: float | None = None) -> models.Node:
        """Stop new placements on the node without changing its state (operators). Idempotent, so retried."""
        return self._run(self._async.cordon_node(node_id, reason, timeout=timeout))

    def uncordon_node(self, node_id: str, *, timeout: float | None = None) -> models.Node:
        """Let placement pick the node again and clear its status reason (operators). Idempotent, so retried."""
        return self._run(self._async.uncordon_node(node_id, timeout=timeout))

    def drain_node(self, node_id: str, reason: str = "", *, timeout: float | None = None) -> models.Node:
        """Take the node out of service and cordon it (operators); a held node drains until released. Not retried."""
        return self._run(self._async.drain_node(node_id, reason, timeout=timeout))

    def start_repair(self, node_id: str, reason: str = "", *, timeout: float | None = None) -> models.Node:
        """Move a QUARANTINED node to REPAIR (operators). Not retried; other states are ``FailedPreconditionError``."""
        return self._run(self._async.start_repair(node_id, reason, timeout=timeout))

    def return_to_service(self, node_id: str, reason: str = "", *, timeout: float | None = None) -> models.Node:
        """Send a QUARANTINED or REPAIR node back to BURN_IN, uncordoned (operators). Not retried."""
        return self._run(self._async.return_to_service(node_id, reason, timeout=timeout))

    def retire_node(self, node_id: str, reason: str = "", *, timeout: float | None = None) -> models.Node:
        """Retire a REGISTERED, QUARANTINED or REPAIR node for good (operators). Not retried."""
        return self._run(self._async.retire_node(node_id, reason, timeout=timeout))

    def list_node_events(
        self, node_id: str, *, page_size: int = 0, page_token: str = "", timeout: float | None = None
    ) -> models.Page[models.NodeEvent]:
        """One page of a node's recorded state changes, oldest first."""
        return self._run(
            self._async.list_node_events(node_id, page_size=page_size, page_token=page_token, timeout=timeout)
        )

    def create_allocation(
        self,
        *,
        gpu_model: str,
        node_count: int,
        tenant_id: str = "",
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> models.CreatedAllocation:
        """Allocate ``node_count`` whole nodes, all or nothing; retried under one ``request_id`` (made if not
        given; ``replayed`` says the server answered from an earlier call's record); ``timeout`` bounds the
        whole call, retries included. Its errors carry the key as ``.request_id``:
        after ``DeadlineExceededError`` or ``UnavailableError``, call again with ``request_id=error.request_id``."""
        return self._run(
            self._async.create_allocation(
                gpu_model=gpu_model, node_count=node_count, tenant_id=tenant_id, request_id=request_id, timeout=timeout
            )
        )

    def get_allocation(self, allocation_id: str, *, timeout: float | None = None) -> models.Allocation:
        """The allocation ``allocation_id``; another tenant's is ``NotFoundError``."""
        return self._run(self._async.get_allocation(allocation_id, timeout=timeout))

    def list_allocations(
        self,
        *,
        tenant_id: str = "",
        state: str | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> models.Page[models.Allocation]:
        """One page of allocations, newest first; tenants see only their own, operators may filter by ``tenant_id``."""
        return self._run(
            self._async.list_allocations(
                tenant_id=tenant_id, state=state, page_size=page_size, page_token=page_token, timeout=timeout
            )
        )

    def iter_allocations(
        self,
        *,
        tenant_id: str = "",
        state: str | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> Iterator[models.Allocation]:
        """Every allocation visible to the caller, newest first, fetching pages as needed; from
        ``page_token``'s page on when one is given. ``timeout`` bounds each page's call."""
        for page in _pages(
            lambda token: self.list_allocations(
                tenant_id=tenant_id, state=state, page_size=page_size, page_token=token, timeout=timeout
            ),
            page_token,
        ):
            yield from page

    def cancel_allocation(self, allocation_id: str, *, timeout: float | None = None) -> models.Operation:
        """Accept a cancel; the returned operation finishes when every node is released."""
        return self._run(self._async.cancel_allocation(allocation_id, timeout=timeout))

    def get_operation(self, name: str, *, timeout: float | None = None) -> models.Operation:
        """The operation ``name`` (``operations/<id>``), done or not; another tenant's is ``NotFoundError``."""
        return self._run(self._async.get_operation(name, timeout=timeout))

    def wait_operation(self, name: str, *, timeout: float = 60.0) -> models.Operation:
        """Wait until the operation is done or ``timeout`` seconds pass (0 or more); check ``.done``."""
        return self._run(self._async.wait_operation(name, timeout=timeout))

    def list_operations(
        self, *, page_size: int = 0, page_token: str = "", timeout: float | None = None
    ) -> models.Page[models.Operation]:
        """One page of the operations the caller may see, newest first."""
        return self._run(self._async.list_operations(page_size=page_size, page_token=page_token, timeout=timeout))

    def delete_operation(self, name: str, *, timeout: float | None = None) -> None:
        """Forget a finished operation; one still running is ``FailedPreconditionError``."""
        self._run(self._async.delete_operation(name, timeout=timeout))

    def write_samples(
        self,
        nodes: Sequence[metrics.NodeSamples] = (),
        series: Sequence[metrics.SeriesSamples] = (),
        *,
        timeout: float | None = None,
    ) -> metrics.WriteResult:
        """Write node pushes and columnar series in one all-or-nothing batch. Retried: repeats are not added twice."""
        return self._run(self._async.write_samples(nodes, series, timeout=timeout))

    def query_metrics(
        self,
        *,
        start: instants.Instant,
        end: instants.Instant,
        node_ids: Sequence[str] = (),
        gpu_indexes: Sequence[int] = (),
        fields: Sequence[str] = (),
        timeout: float | None = None,
    ) -> metrics.MetricsResult:
        """Raw samples in [start, end): datetimes (naive ones are UTC) or int ms since the epoch; empty lists match
        all."""
        return self._run(
            self._async.query_metrics(
                start=start, end=end, node_ids=node_ids, gpu_indexes=gpu_indexes, fields=fields, timeout=timeout
            )
        )

    def query_metrics_range(
        self,
        *,
        start: instants.Instant,
        end: instants.Instant,
        step: timedelta | int,
        aggregation: str = "avg",
        node_ids: Sequence[str] = (),
        gpu_indexes: Sequence[int] = (),
        fields: Sequence[str] = (),
        timeout: float | None = None,
    ) -> metrics.MetricsResult:
        """One ``aggregation`` (avg, min, max, sum, count, last, rate) per ``step`` (ms if an int) in [start, end),
        whose times are as for ``query_metrics``."""
        return self._run(
            self._async.query_metrics_range(
                start=start,
                end=end,
                step=step,
                aggregation=aggregation,
                node_ids=node_ids,
                gpu_indexes=gpu_indexes,
                fields=fields,
                timeout=timeout,
            )
        )

    def get_invoice(self, period: str, *, tenant_id: str = "", timeout: float | None = None) -> billing.Invoice:
        """The invoice for ``period`` (``YYYY-MM``, UTC); operators must name ``tenant_id``, tenants may omit it."""
        return self._run(self._async.get_invoice(period, tenant_id=tenant_id, timeout=timeout))

    def finalize_invoice(
        self, period: str, *, tenant_id: str, timeout: float | None = None
    ) -> billing.FinalizedInvoice:
        """Freeze a tenant's invoice for an ended period (operators). Idempotent, so retried."""
        return self._run(self._async.finalize_invoice(period, tenant_id=tenant_id, timeout=timeout))

    def list_usage_events(
        self,
        *,
        tenant_id: str = "",
        start_time: instants.Instant | None = None,
        end_time: instants.Instant | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> models.Page[billing.UsageEvent]:
        """One page of the usage-event log, oldest first; ``[start_time, end_time)`` if given, as datetimes (naive
        ones are UTC) or int ms since the epoch."""
        return self._run(
            self._async.list_usage_events(
                tenant_id=tenant_id,
                start_time=start_time,
                end_time=end_time,
                page_size=page_size,
                page_token=page_token,
                timeout=timeout,
            )
        )

    def iter_usage_events(
        self,
        *,
        tenant_id: str = "",
        start_time: instants.Instant | None = None,
        end_time: instants.Instant | None = None,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> Iterator[billing.UsageEvent]:
        """Every usage event the caller sees in the window, oldest first, page by page; ``timeout`` bounds each
        page's call."""
        for page in _pages(
            lambda token: self.list_usage_events(
                tenant_id=tenant_id,
                start_time=start_time,
                end_time=end_time,
                page_size=page_size,
                page_token=token,
                timeout=timeout,
            ),
            "",
        ):
            yield from page

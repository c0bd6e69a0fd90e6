"""``Client``: the blocking twin of ``AsyncClient`` for scripts and notebooks.

It runs an ``AsyncClient`` on a private event loop in a daemon thread, so it works the same
inside and outside programs that already run an event loop, and shares every behaviour of the
async client (deadlines, retries, automatic request ids, error types), except that a closed
``Client`` stays closed: make a new one.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from typing import Any, Concatenate, ParamSpec, TypeVar

from clients.async_client import DEFAULT_MAX_RECEIVE_BYTES, DEFAULT_TIMEOUT, AsyncClient, RetryPolicy

T = TypeVar("T")
P = ParamSpec("P")


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


def _blocking(
    method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Client, P], T]:
    """``Client``'s form of an ``AsyncClient`` method: the same call, awaited on the client's loop."""

    def call(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._async, *args, **kwargs))

    functools.update_wrapper(call, method)
    return call


def _blocking_iter(
    method: Callable[Concatenate[AsyncClient, P], AsyncIterator[T]],
) -> Callable[Concatenate[Client, P], Generator[T, None, None]]:
    """``Client``'s form of an ``AsyncClient`` iterator: each item fetched on the client's loop,
    and the listing closed there when the caller stops early."""

    def iterate(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> Generator[T, None, None]:
        items = method(self._async, *args, **kwargs)
        try:
            while True:
                try:
                    yield self._run(_next(items))
                except StopAsyncIteration:
                    return
        finally:
            if not self._loop.is_closed():
                self._run(_close(items))

    functools.update_wrapper(iterate, method)
    return iterate


async def _next(items: AsyncIterator[T]) -> T:
    """The next item of ``items`` (StopAsyncIteration after the last)."""
    return await anext(items)


async def _close(items: AsyncIterator[Any]) -> None:
    """Close ``items`` if it is an async generator (what AsyncClient's listings are)."""
    close = getattr(items, "aclose", None)
    if close is not None:
        await close()


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

    # Each method is AsyncClient's, run on the client's loop: one signature, one docstring and
    # one behaviour for both clients, written once.

    create_tenant = _blocking(AsyncClient.create_tenant)
    get_tenant = _blocking(AsyncClient.get_tenant)
    list_tenants = _blocking(AsyncClient.list_tenants)
    create_tenant_token = _blocking(AsyncClient.create_tenant_token)
    create_agent_token = _blocking(AsyncClient.create_agent_token)
    create_operator_token = _blocking(AsyncClient.create_operator_token)
    list_tokens = _blocking(AsyncClient.list_tokens)
    iter_tokens = _blocking_iter(AsyncClient.iter_tokens)
    revoke_token = _blocking(AsyncClient.revoke_token)

    register_node = _blocking(AsyncClient.register_node)
    get_node = _blocking(AsyncClient.get_node)
    list_nodes = _blocking(AsyncClient.list_nodes)
    complete_burn_in = _blocking(AsyncClient.complete_burn_in)
    cordon_node = _blocking(AsyncClient.cordon_node)
    uncordon_node = _blocking(AsyncClient.uncordon_node)
    drain_node = _blocking(AsyncClient.drain_node)
    start_repair = _blocking(AsyncClient.start_repair)
    return_to_service = _blocking(AsyncClient.return_to_service)
    retire_node = _blocking(AsyncClient.retire_node)
    list_node_events = _blocking(AsyncClient.list_node_events)
    set_health_automation = _blocking(AsyncClient.set_health_automation)
    get_health_automation = _blocking(AsyncClient.get_health_automation)
    set_spare_pool = _blocking(AsyncClient.set_spare_pool)
    list_spare_pools = _blocking(AsyncClient.list_spare_pools)
    list_health_events = _blocking(AsyncClient.list_health_events)
    audit_isolation = _blocking(AsyncClient.audit_isolation)
    get_fragmentation = _blocking(AsyncClient.get_fragmentation)
    plan_defragmentation = _blocking(AsyncClient.plan_defragmentation)
    apply_defragmentation = _blocking(AsyncClient.apply_defragmentation)

    create_allocation = _blocking(AsyncClient.create_allocation)
    get_allocation = _blocking(AsyncClient.get_allocation)
    explain_allocation = _blocking(AsyncClient.explain_allocation)
    wait_admitted = _blocking(AsyncClient.wait_admitted)
    list_allocations = _blocking(AsyncClient.list_allocations)
    iter_allocations = _blocking_iter(AsyncClient.iter_allocations)
    cancel_allocation = _blocking(AsyncClient.cancel_allocation)
    set_quota = _blocking(AsyncClient.set_quota)
    list_quotas = _blocking(AsyncClient.list_quotas)

    get_operation = _blocking(AsyncClient.get_operation)
    wait_operation = _blocking(AsyncClient.wait_operation)
    list_operations = _blocking(AsyncClient.list_operations)
    delete_operation = _blocking(AsyncClient.delete_operation)

    write_samples = _blocking(AsyncClient.write_samples)
    query_metrics = _blocking(AsyncClient.query_metrics)
    query_metrics_range = _blocking(AsyncClient.query_metrics_range)
    list_metric_outliers = _blocking(AsyncClient.list_metric_outliers)

    get_invoice = _blocking(AsyncClient.get_invoice)
    finalize_invoice = _blocking(AsyncClient.finalize_invoice)
    list_usage_events = _blocking(AsyncClient.list_usage_events)
    iter_usage_events = _blocking_iter(AsyncClient.iter_usage_events)

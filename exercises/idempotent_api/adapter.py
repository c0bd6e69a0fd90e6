"""The idempotent-API interface over a real control plane, called as a client calls it.

One control plane serves the whole run: started on first use, on a loopback port with the
project's test helper (``tests.conftest.running_control_plane``, SQLite, scrubs that take no
time), on an event loop of its own thread, and stopped when the suite has run. Each
``AllocationService`` is a tenant of its own; each method is one call of the Python client
(``clients.AsyncClient``, as the helper hands it out), made on the control plane's loop and
awaited from the caller's. The request ids, the cancel operations and the page tokens are the
server's (services/allocations/commands.py, services/allocations/idempotency.py,
services/paging.py): nothing here decides any of them.

The control plane places with its own scheduler, inside the create's transaction: the ``place``
a one-file answer awaits stands for that, and is not called here. So that a placement never
fails for want of nodes (which the interface has no word for), the fleet grows ahead of the
creates: every node a create asks for is registered, ready, before the call, and a node that
comes back from a cancel is not counted again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import tempfile
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from exercises.harness import at_finish
from services.store.engine import sqlite_url
from tests.conftest import register_ready_nodes, running_control_plane

T = TypeVar("T")
Place = Callable[[str, int], Awaitable[list[str]]]
# The reason the server gives a request id first used for another request.
KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
# Nodes registered at a time when the fleet grows, in this many registrations at once.
_BATCH, _AT_ONCE = 64, 4


class RequestIdReused(Exception):
    """INVALID_ARGUMENT (IDEMPOTENCY_KEY_REUSED) from the server; the client's error is its cause."""


class _ControlPlane:
    """The running control plane, its operator's client and the fleet grown so far."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="exercise-control-plane", daemon=True)
        self._thread.start()
        self._scratch = tempfile.TemporaryDirectory(prefix="gpucloud-idempotent-api-")
        self._stack = contextlib.AsyncExitStack()
        self._tenants = itertools.count(1)
        self._batches = itertools.count(1)
        self._ordered: Counter[str] = Counter()
        self._registered: Counter[str] = Counter()
        self._fleet: asyncio.Lock | None = None
        data = Path(self._scratch.name) / "data"
        running = self.wait(
            self._stack.enter_async_context(running_control_plane(data, sqlite_url(data), scrub_seconds=0.0))
        )
        self.client = running.client()
        self._stack.push_async_callback(self.client.close)
        at_finish(self.stop)

    def wait(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the control plane's loop and block until it is done."""
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the control plane's loop; awaited from any other loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._loop))

    async def new_tenant(self) -> str:
        """A tenant of its own for a new service."""
        created = await self.client.create_tenant(f"tenant-{next(self._tenants):05d}")
        return created.tenant.tenant_id

    async def grow(self, gpu_model: str, node_count: int) -> None:
        """Register ready ``gpu_model`` nodes until every node asked for so far has one of its own."""
        if self._fleet is None:
            self._fleet = asyncio.Lock()
        async with self._fleet:
            self._ordered[gpu_model] += node_count
            while self._registered[gpu_model] < self._ordered[gpu_model]:
                prefix = f"{gpu_model.lower()}-{next(self._batches)}"
                share = _BATCH // _AT_ONCE
                await asyncio.gather(
                    *(
                        register_ready_nodes(self.client, share, gpu_model=gpu_model, prefix=f"{prefix}-{part}")
                        for part in range(_AT_ONCE)
                    )
                )
                self._registered[gpu_model] += _BATCH

    def stop(self) -> None:
        """Close the client, stop the control plane and its loop, remove its files."""
        self.wait(self._stack.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._scratch.cleanup()


_plane: _ControlPlane | None = None


def _control_plane() -> _ControlPlane:
    global _plane
    if _plane is None:
        _plane = _ControlPlane()
    return _plane


class AllocationService:
    """One tenant of the control plane, as its operator calls it. ``place`` is not called: the
    control plane places with its own scheduler."""

    def __init__(self, place: Place) -> None:
        self._plane = _control_plane()
        self._tenant = self._plane.wait(self._plane.new_tenant())

    async def create(self, request_id: str, gpu_model: str, node_count: int) -> Any:
        """``create_allocation`` with the request id; the server's IDEMPOTENCY_KEY_REUSED is RequestIdReused."""
        return await self._plane.run(self._create(request_id, gpu_model, node_count))

    async def _create(self, request_id: str, gpu_model: str, node_count: int) -> Any:
        await self._plane.grow(gpu_model, node_count)
        try:
            return await self._plane.client.create_allocation(
                gpu_model=gpu_model, node_count=node_count, tenant_id=self._tenant, request_id=request_id
            )
        except Exception as error:
            if getattr(error, "reason", None) == KEY_REUSED:
                raise RequestIdReused(str(error)) from error
            raise

    async def cancel(self, allocation_id: str) -> Any:
        """``cancel_allocation``: the server's cancel Operation."""
        return await self._plane.run(self._plane.client.cancel_allocation(allocation_id))

    async def get_operation(self, name: str) -> Any:
        """``get_operation``."""
        return await self._plane.run(self._plane.client.get_operation(name))

    async def list_page(self, page_size: int, page_token: str = "") -> Any:
        """``list_allocations`` of this tenant: the server's page and its opaque token."""
        listing = self._plane.client.list_allocations(
            tenant_id=self._tenant, page_size=page_size, page_token=page_token
        )
        return await self._plane.run(listing)

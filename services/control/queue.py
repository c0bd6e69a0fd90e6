"""The work queue a controller reads: keys to reconcile, each handed to one worker at a time.

A key is waiting, being processed, or neither. Adding a waiting key does nothing (only
``critical=True`` moves it ahead); adding a key that a worker holds marks it dirty, and
``done`` queues it again, so a change seen mid-reconcile is never lost and one key never runs
on two workers at once. Keys that failed come back after a per-key exponential backoff.
Everything runs on one event loop: no method is thread-safe.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from services.control.backoff import Backoff

K = TypeVar("K", bound=Hashable)


class QueueShutDown(Exception):
    """The queue was shut down: ``get`` hands out no more keys."""


# controller-runtime's per-item defaults.
PER_KEY_BACKOFF = Backoff(base_s=0.005, cap_s=1000.0)


class WorkQueue(Generic[K]):
    """De-duplicating keys for workers: critical keys first, then first in, first out."""

    def __init__(self, backoff: Backoff | None = None) -> None:
        self._backoff = backoff or PER_KEY_BACKOFF
        # Dicts keep insertion order and remove in O(1): a FIFO that also answers "is it here?".
        self._critical: dict[K, None] = {}
        self._normal: dict[K, None] = {}
        self._processing: set[K] = set()
        # Keys added while processing, and whether any of those adds was critical.
        self._dirty: dict[K, bool] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._failures: dict[K, int] = {}
        self._getters: deque[asyncio.Future[None]] = deque()
        self._shut_down = False
        self._closed = asyncio.Event()

    def __len__(self) -> int:
        """How many keys wait for a worker (not those being processed or on a timer)."""
        return len(self._critical) + len(self._normal)

    @property
    def shutting_down(self) -> bool:
        """Whether ``shut_down`` was called."""
        return self._shut_down

    def add(self, key: K, *, critical: bool = False) -> None:
        """Queue ``key`` unless it already waits; ``critical`` puts it ahead of ordinary keys."""
        if self._shut_down:
            return
        if key in self._processing:
            self._dirty[key] = self._dirty.get(key, False) or critical
            return
        if key in self._critical:
            return
        if key in self._normal:
            if not critical:
                return
            del self._normal[key]
        self._enqueue(key, critical=critical)

    def add_after(self, key: K, delay_s: float) -> None:
        """Add ``key`` once ``delay_s`` has passed; of two pending delays the earlier one wins."""
        if self._shut_down:
            return
        if delay_s <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay_s
        pending = self._timers.get(key)
        if pending is not None:
            if pending.when() <= when:
                return
            pending.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def add_rate_limited(self, key: K) -> float:
        """Add ``key`` after its backoff, counting one more failure; returns the delay in seconds."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = self._backoff.delay_s(failures)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Reset ``key``'s failures: its next ``add_rate_limited`` waits the base delay."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        """How many times ``key`` was added rate-limited since it was last forgotten."""
        return self._failures.get(key, 0)

    def due(self, key: K) -> float | None:
        """The event-loop time at which a delayed ``key`` will be added; None if none pending."""
        pending = self._timers.get(key)
        return None if pending is None else pending.when()

    async def get(self) -> K:
        """Wait for the next key and mark it processing; the caller must call ``done(key)``.

        Raises QueueShutDown once the queue is shut down, also for keys still waiting.
        """
        while True:
            if self._shut_down:
                raise QueueShutDown()
            if self._critical or self._normal:
                break
            await self._wait()
        ready = self._critical or self._normal
        key = next(iter(ready))
        del ready[key]
        self._processing.add(key)
        return key

    def done(self, key: K) -> None:
        """Finish processing ``key``: queue it again if it was added meanwhile (no-op if not held)."""
        if key not in self._processing:
            return
        self._processing.discard(key)
        if key in self._dirty:
            critical = self._dirty.pop(key)
            if not self._shut_down:
                self._enqueue(key, critical=critical)

    def shut_down(self) -> None:
        """Stop handing out keys: wake every waiting ``get`` with QueueShutDown, cancel timers."""
        self._shut_down = True
        self._closed.set()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._dirty.clear()
        while self._getters:
            self._wake_one()

    async def wait_shut_down(self) -> None:
        """Return once ``shut_down`` has been called."""
        await self._closed.wait()

    def _enqueue(self, key: K, *, critical: bool) -> None:
        (self._critical if critical else self._normal)[key] = None
        self._wake_one()

    def _fire(self, key: K) -> None:
        del self._timers[key]
        self.add(key)

    def _wake_one(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _wait(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._getters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # Woken, then cancelled before running: pass the wake-up to another getter.
                self._wake_one()
            elif waiter in self._getters:
                self._getters.remove(waiter)
            raise

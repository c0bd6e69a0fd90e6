"""A controller: a bounded pool of workers that reconcile the keys of a work queue.

Level-triggered: ``reconcile(key)`` reads the state it acts on; an event only names the key.
A periodic resync adds every key ``list_keys`` returns, so state that changed without an event
(or whose event was lost) is reconciled anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

import structlog

from services.control.queue import QueueShutDown, WorkQueue

K = TypeVar("K", bound=Hashable)

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a reconcile that succeeded asks for: nothing, or another pass after a delay."""

    requeue_after_s: float | None = None


class Fatal(Exception):
    """A reconcile found it cannot go on: the controller stops and ``run`` raises this."""


class AlreadyRunning(RuntimeError):
    """``run`` was called while another ``run`` of the same controller had not ended."""


Reconcile = Callable[[K], Awaitable[Outcome]]
ListKeys = Callable[[], Awaitable[Iterable[K]]]


class Controller(Generic[K]):
    """Runs ``reconcile`` over its queue's keys on ``workers`` concurrent workers.

    A reconcile that raises is logged and its key added rate-limited; one that succeeds resets
    the key's failures and may ask to be requeued. ``Fatal`` from a reconcile or ``list_keys``,
    or cancelling ``run``, cancels every worker and the resync. The queue outlives a ``run``:
    a key interrupted mid-reconcile waits in it again, so ``run`` can be called again (by a
    manager restarting it). ``shut_down`` ends the controller for good: ``run`` returns once
    in-flight reconciles have finished.
    """

    def __init__(
        self,
        name: str,
        reconcile: Reconcile[K],
        *,
        workers: int = 1,
        list_keys: ListKeys[K] | None = None,
        resync_s: float | None = None,
        queue: WorkQueue[K] | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if resync_s is not None and resync_s <= 0:
            raise ValueError(f"resync_s must be > 0, got {resync_s}")
        self.name = name
        self.queue: WorkQueue[K] = queue if queue is not None else WorkQueue()
        self._reconcile = reconcile
        self._workers = workers
        self._list_keys = list_keys
        self._resync_s = resync_s
        self._running = False

    async def run(self) -> None:
        """Reconcile until the queue is shut down (returns), a ``Fatal`` (raised), or cancelled."""
        if self._running:
            raise AlreadyRunning(self.name)
        self._running = True
        try:
            async with asyncio.TaskGroup() as group:
                for index in range(self._workers):
                    group.create_task(self._work(), name=f"{self.name}-worker-{index}")
                if self._list_keys is not None:
                    group.create_task(self._resync(self._list_keys), name=f"{self.name}-resync")
        except* Fatal as fatal:
            # Several workers may fail at once; the first one explains the stop.
            raise fatal.exceptions[0] from None
        finally:
            self._running = False

    def shut_down(self) -> None:
        """End the controller: no more keys are handed out, and ``run`` returns."""
        self.queue.shut_down()

    async def _work(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except QueueShutDown:
                return
            try:
                await self._reconcile_one(key)
            except BaseException:
                # Interrupted (cancelled, or Fatal): the key is still owed a reconcile.
                self.queue.add(key)
                raise
            finally:
                self.queue.done(key)

    async def _reconcile_one(self, key: K) -> None:
        try:
            outcome = await self._reconcile(key)
        except Fatal as fatal:
            log.error("reconcile_fatal", controller=self.name, key=str(key), error=type(fatal).__name__)
            raise
        except Exception as error:
            delay_s = self.queue.add_rate_limited(key)
            log.warning(
                "reconcile_failed",
                controller=self.name,
                key=str(key),
                error=type(error).__name__,
                failures=self.queue.failures(key),
                retry_in_s=delay_s,
                exc_info=error,
            )
            return
        self.queue.forget(key)
        if outcome.requeue_after_s is not None:
            self.queue.add_after(key, outcome.requeue_after_s)

    async def _resync(self, list_keys: ListKeys[K]) -> None:
        while True:
            await self._add_listed(list_keys)
            if self._resync_s is None:
                return
            try:
                async with asyncio.timeout(self._resync_s):
                    await self.queue.wait_shut_down()
                    return
            except TimeoutError:
                continue

    async def _add_listed(self, list_keys: ListKeys[K]) -> None:
        try:
            keys = await list_keys()
        except Fatal:
            raise
        except Exception as error:
            # The next resync lists again; the keys already queued are still reconciled.
            log.warning("resync_failed", controller=self.name, error=type(error).__name__)
            return
        for key in keys:
            self.queue.add(key)

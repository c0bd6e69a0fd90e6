"""Leader election on a lease in the database: one replica at a time runs what only one may.

``LeaderElector.run`` tries to take the lease every ``retry_s``. Once it holds it, it starts
``while_leading()`` as a task and renews the lease every ``renew_s``. A renewal that fails, or
that finds the lease taken, cancels that task at once and the elector goes back to trying.

Never two leaders: another replica takes the lease only once its ``expires_us`` (written as
this replica's wall clock before the renewal, plus ``duration_s``) has passed, and this replica
stops leading ``duration_s - margin_s`` after it started its last successful renewal, by its
own monotonic clock, whether or not the database answers. The margin, half of what separates
``renew_s`` from ``duration_s``, is what a renewal has to complete in and what the replicas'
wall clocks may disagree by.

Cancelling ``run`` cancels ``while_leading``, gives the lease up (best effort, bounded), and
re-raises. ``while_leading`` ending by itself gives the lease up too, and ``run`` returns or
raises as it did.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from functools import partial

import structlog

from services.clock import now_us
from services.control import repository
from services.store.engine import Database

log = structlog.get_logger(__name__)

# How long a release on the way out may take: past it the lease is left to expire.
RELEASE_TIMEOUT_S = 2.0

WhileLeading = Callable[[], Awaitable[None]]


class UnusableLeaseTimes(ValueError):
    """Lease times that cannot keep one leader: need 0 < renew_s < duration_s and retry_s > 0."""


def holder_id() -> str:
    """A holder id unique to this process: host name, pid and a random suffix (a restarted
    process that got the same pid is still another holder)."""
    return f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(4)}"


class _Lost(Exception):
    """This replica no longer holds the lease, or cannot tell that it does."""


class LeaderElector:
    """Runs ``while_leading`` only while this replica holds the lease ``name`` (module docstring)."""

    def __init__(
        self,
        store: Database,
        name: str,
        holder: str,
        *,
        duration_s: float,
        renew_s: float,
        retry_s: float,
        clock: Callable[[], int] = now_us,
        release_on_cancel: bool = True,
    ) -> None:
        """``clock``: the wall clock in microseconds that lease times are written in, shared by
        the replicas. ``release_on_cancel=False`` leaves the lease to expire when ``run`` is
        cancelled, as a process that dies would."""
        if not 0 < renew_s < duration_s or retry_s <= 0:
            raise UnusableLeaseTimes(
                f"need 0 < renew_s < duration_s and retry_s > 0, got duration_s={duration_s}"
                f" renew_s={renew_s} retry_s={retry_s}"
            )
        self._store = store
        self._name = name
        self._holder = holder
        self._duration_us = round(duration_s * 1_000_000)
        self._renew_s = renew_s
        self._retry_s = retry_s
        # What leading may last after a renewal began: the lease's duration less the margin.
        self._term_s = duration_s - (duration_s - renew_s) / 2
        self._clock = clock
        self._release_on_cancel = release_on_cancel
        self._leading = False

    @property
    def is_leader(self) -> bool:
        """Whether this replica holds the lease and runs ``while_leading`` under it (False as soon
        as the lease is lost, while ``while_leading`` is being stopped)."""
        return self._leading

    @property
    def holder(self) -> str:
        """The id this elector holds the lease under."""
        return self._holder

    async def run(self, while_leading: WhileLeading) -> None:
        """Lead whenever the lease can be had, running ``while_leading`` meanwhile; returns or
        raises as ``while_leading`` does when it ends by itself."""
        try:
            while True:
                deadline = await self._acquire()
                ended = await self._lead(while_leading, deadline)
                if ended is not None:
                    await self._release()
                    ended.result()  # its exception, if it raised
                    return
        except asyncio.CancelledError:
            if self._release_on_cancel:
                await self._release()
            raise

    async def _try(self) -> float | None:
        """One acquire or renewal; the monotonic instant leading must stop by, or None when
        the lease is another's. Raises what the database raised, or TimeoutError when it did
        not answer within the term (a lease taken that late would be over already)."""
        started = asyncio.get_running_loop().time()
        async with asyncio.timeout(self._term_s):
            held = await self._store.transact(
                partial(repository.acquire, self._name, self._holder, self._clock(), self._duration_us)
            )
        return started + self._term_s if held else None

    async def _acquire(self) -> float:
        """Try every ``retry_s`` until the lease is this replica's; when leading must stop."""
        while True:
            try:
                deadline = await self._try()
            except Exception as error:
                log.warning("lease_acquire_failed", lease=self._name, holder=self._holder, error=repr(error))
                deadline = None
            if deadline is not None:
                return deadline
            await asyncio.sleep(self._retry_s)

    async def _lead(self, while_leading: WhileLeading, deadline: float) -> asyncio.Task[None] | None:
        """Run ``while_leading`` and renew until the lease is lost (None, the task cancelled and
        ended) or the task ends by itself (the task)."""
        loop = asyncio.get_running_loop()
        self._leading = True
        log.info("lease_acquired", lease=self._name, holder=self._holder)
        task = asyncio.create_task(_run(while_leading), name=f"leading:{self._name}")
        try:
            renew_at = loop.time() + self._renew_s
            while True:
                # Wake for the renewal, or at the deadline should it come first.
                done, _ = await asyncio.wait({task}, timeout=max(0.0, min(renew_at, deadline) - loop.time()))
                if done:
                    return task
                renew_at = loop.time() + self._renew_s
                deadline = await self._renew(deadline)
        except _Lost as lost:
            log.warning("lease_lost", lease=self._name, holder=self._holder, reason=str(lost))
            return None
        finally:
            # No longer the leader from here: while_leading is being stopped, not running on.
            self._leading = False
            await _stop(task)

    async def _renew(self, deadline: float) -> float:
        """Renew within what is left of the term; the new deadline, or _Lost."""
        loop = asyncio.get_running_loop()
        if loop.time() >= deadline:
            raise _Lost("the term ran out before a renewal succeeded")
        try:
            async with asyncio.timeout(deadline - loop.time()):
                renewed = await self._try()
        except TimeoutError:
            raise _Lost("the term ran out before a renewal succeeded") from None
        except Exception as error:
            raise _Lost(f"renewal failed: {error!r}") from error
        if renewed is None:
            raise _Lost("another holder has the lease")
        return renewed

    async def _release(self) -> None:
        """Give the lease up, so that another replica need not wait for it to expire; bounded,
        and a failure only logged (the lease then expires)."""
        try:
            async with asyncio.timeout(RELEASE_TIMEOUT_S):
                released = await self._store.transact(partial(repository.release, self._name, self._holder))
        except Exception as error:
            log.warning("lease_release_failed", lease=self._name, holder=self._holder, error=repr(error))
            return
        if released:
            log.info("lease_released", lease=self._name, holder=self._holder)


async def _run(while_leading: WhileLeading) -> None:
    await while_leading()


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` if it still runs and wait until it has ended."""
    if task.done():
        return
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled() and task.exception() is not None:
        log.warning("while_leading_failed_on_cancel", error=repr(task.exception()))

"""One owner for the control plane's background loops: crashed loops come back, stop leaks none.

A loop is a name and a factory that makes a fresh coroutine for each run, so that a run which
raised can be started again. Each loop lives in one task of its own; a crash of one never
touches the others (unlike ``asyncio.TaskGroup``, which would cancel the siblings).

The restart rule:

- a run that raises (any ``Exception``, or a ``CancelledError`` nobody asked for) is logged as
  ``loop_crashed`` and started again after a backoff (``RESTART_BACKOFF``: 1 s after its first
  consecutive crash, doubling per further one, at most 60 s). A run that lasted longer than the
  cap before crashing counts as healthy: the crash that ended it is the first of a new series.
- a run that returns is logged as ``loop_returned`` and not started again: returning is how a
  loop says its work is over.
- ``stop`` cancels every run and every pending restart, and returns once all of their tasks
  have ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

import structlog

from services.control.backoff import Backoff

log = structlog.get_logger(__name__)

# Makes one run of a loop: called again for each restart, so each run gets a fresh coroutine.
LoopFactory = Callable[[], Awaitable[None]]


class LoopState(StrEnum):
    """Where one loop is."""

    PENDING = "pending"  # added; the manager has not started yet
    RUNNING = "running"
    RESTARTING = "restarting"  # crashed, waiting out its backoff
    STOPPED = "stopped"  # returned, or the manager stopped


class LoopExists(ValueError):
    """A loop of that name is already owned by this manager."""


class ManagerStopped(RuntimeError):
    """The manager has been stopped: it starts nothing more."""


# A crashed loop waits 1 s, then 2 s, 4 s... at most a minute.
RESTART_BACKOFF = Backoff(base_s=1.0, cap_s=60.0)


def consecutive_crashes(earlier: int, *, ran_seconds: float, cap_s: float) -> int:
    """The crash count in a row once a run of ``ran_seconds`` has crashed, ``earlier`` having
    come before it: a run longer than the backoff's cap was healthy, and starts a new series."""
    return 1 if ran_seconds > cap_s else earlier + 1


@dataclass(frozen=True)
class LoopStatus:
    """One loop as seen from outside: for operators and tests."""

    name: str
    state: LoopState
    # Runs started after a crash, over the manager's life.
    restarts: int
    # Crashes since the last run that lasted longer than the backoff's cap.
    consecutive_crashes: int
    # The last crash, as "ErrorType: message"; None if it never crashed.
    last_error: str | None


@dataclass
class _Loop:
    name: str
    factory: LoopFactory
    state: LoopState = LoopState.PENDING
    restarts: int = 0
    crashes: int = 0
    last_error: str | None = None
    task: asyncio.Task[None] | None = None

    def status(self) -> LoopStatus:
        return LoopStatus(self.name, self.state, self.restarts, self.crashes, self.last_error)


class Manager:
    """Owns named loops, restarts those that crash, and stops them all (module docstring)."""

    def __init__(self, backoff: Backoff | None = None) -> None:
        self._backoff = backoff or RESTART_BACKOFF
        self._loops: dict[str, _Loop] = {}
        self._started = False
        self._stopping = False

    def add(self, name: str, factory: LoopFactory) -> None:
        """Own the loop ``factory`` under ``name``; it runs at once if the manager has started.
        LoopExists for a name taken, ManagerStopped after ``stop``."""
        if self._stopping:
            raise ManagerStopped(f"cannot add loop {name!r}: the manager has stopped")
        if name in self._loops:
            raise LoopExists(f"a loop named {name!r} is already owned by this manager")
        loop = self._loops[name] = _Loop(name, factory)
        if self._started:
            self._launch(loop)

    def start(self) -> None:
        """Run every loop added so far (and, from now on, each one as it is added); needs a
        running event loop. A second call does nothing; ManagerStopped after ``stop``."""
        if self._stopping:
            raise ManagerStopped("cannot start: the manager has stopped")
        if self._started:
            return
        self._started = True
        for loop in self._loops.values():
            self._launch(loop)

    def status(self) -> dict[str, LoopStatus]:
        """Every loop's state and counts, by name, in the order they were added."""
        return {name: loop.status() for name, loop in self._loops.items()}

    async def stop(self) -> None:
        """Cancel every run and pending restart and wait until each has ended. Safe to call
        again; call it from outside the loops (a loop awaiting it would wait for itself)."""
        self._stopping = True
        tasks = [loop.task for loop in self._loops.values() if loop.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for loop in self._loops.values():
            loop.state = LoopState.STOPPED

    def _launch(self, loop: _Loop) -> None:
        loop.task = asyncio.create_task(self._supervise(loop), name=loop.name)

    async def _supervise(self, loop: _Loop) -> None:
        """Run ``loop`` until it returns or the manager stops, restarting it after each crash."""
        clock = asyncio.get_running_loop().time
        while True:
            loop.state = LoopState.RUNNING
            started = clock()
            error = await self._run_once(loop)
            if error is None:
                log.info("loop_returned", loop=loop.name)
                loop.state = LoopState.STOPPED
                return
            if self._stopping:
                # Raised on its way out of a cancellation stop asked for: not a crash.
                loop.state = LoopState.STOPPED
                return
            delay = self._crashed(loop, error, ran_seconds=clock() - started)
            del error  # its traceback holds the crashed run's frames: not kept through the wait
            loop.state = LoopState.RESTARTING
            await asyncio.sleep(delay)
            loop.restarts += 1

    def _crashed(self, loop: _Loop, error: BaseException, *, ran_seconds: float) -> float:
        """Count and log a crash of ``loop``; return how long to wait before its next run."""
        loop.crashes = consecutive_crashes(loop.crashes, ran_seconds=ran_seconds, cap_s=self._backoff.cap_s)
        loop.last_error = f"{type(error).__name__}: {error}"
        delay = self._backoff.delay_s(loop.crashes - 1)
        log.error(
            "loop_crashed",
            loop=loop.name,
            error_type=type(error).__name__,
            error=str(error),
            consecutive_crashes=loop.crashes,
            restart_in_seconds=delay,
            exc_info=error,
        )
        return delay

    async def _run_once(self, loop: _Loop) -> BaseException | None:
        """One run of ``loop``: None when it returned, else what it raised. Cancellation that
        was asked of this task propagates; a CancelledError the loop raised by itself (a timeout
        mishandled inside it) is a crash like any other."""
        try:
            await loop.factory()
        except asyncio.CancelledError as error:
            task = asyncio.current_task()
            if self._stopping or (task is not None and task.cancelling()):
                raise
            return error
        except Exception as error:
            return error
        return None

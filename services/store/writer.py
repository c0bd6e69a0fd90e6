"""The SQLite writer: one connection, whole transactions without per-statement hops, group commit.

Hot-path transactions (store/tx.py) are queued here. A pump task owned by the writer takes
every transaction waiting, opens one ``BEGIN IMMEDIATE``, runs the
transactions' statements one after another, commits once on the thread, and only then
answers their callers: nothing is acknowledged before it is durable (``synchronous=FULL``),
and under load one fsync covers many requests.

A transaction that fails must leave no trace and must not disturb the others in its group.
Almost every failure (not found, no capacity, a reused key) is found by reading, before the
transaction writes anything, so the group runs optimistically, without savepoints: a failure
with nothing written needs no undo. Only when a transaction fails after writing (the
connection's ``total_changes`` moved) is the group rolled back and run again from the start,
each transaction in its own savepoint. That is why transactions are queued as factories: the
second pass needs fresh generators. Savepoints on every transaction would cost a sub-journal
copy of each page a transaction touched (docs/performance.md). Between the rollback and the
second ``BEGIN IMMEDIATE`` the write lock is free: another process could take it, and if it held
it past the busy timeout the whole group would fail as UNAVAILABLE, which clients retry (nothing
is acknowledged). One savepoint around the group would keep the lock instead, at a cost on every
group; with one server per SQLite file, which is how the embedded store is meant to be run, the
race has nobody to lose to.

Whether the writer limits the server shows in its load, logged as ``sqlite_writer_load`` at
most once a minute while it works: the share of the time a group was in progress (``busy``),
transactions per group, and the milliseconds a group spends beginning, running its statements
and committing. Under a steady load that saturates it, ``busy`` is close to 1.

Where each part runs, and why:

- ``COMMIT`` runs on the writer's thread: it waits for fsync.
- ``BEGIN IMMEDIATE`` is tried on the loop with no busy wait (the connection's busy timeout is
  0): with one server per file the write lock is free, and taking it waits for nothing. Only
  when another connection holds it is it tried again on the writer's thread, waiting up to the
  busy timeout. Each hop to the thread waits for the loop to come back to it: under a fleet
  converging, a group's BEGIN on the thread took 6.5 ms of the 17 ms the group took, where
  taking the lock itself took 0.1 ms (docs/performance.md).
- The statements run on the event loop. Each is a little CPU on SQLite's page cache, and the
  connection is idle meanwhile, so handing each to a thread would cost more than the
  statement: a thread round trip, and two threads trading the GIL on every ``sqlite3`` call,
  which under load costs far more per request than the statements (docs/performance.md). The
  group's statements are bounded (``MAX_GROUP`` transactions of a few statements each), so
  the loop is never held for long.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from services.store import sqlite_driver
from services.store.tx import Tx, run_on_connection

log = structlog.get_logger(__name__)

T = TypeVar("T")
# Transactions per commit at most: bounds how long one group holds the loop and the lock.
MAX_GROUP = 64
# How often the writer logs how busy it was (``sqlite_writer_load``), at most.
LOAD_REPORT_SECONDS = 60.0


class WriterClosed(RuntimeError):
    """The store is closing: the transaction was not run."""


class StorageReplaced(RuntimeError):
    """The database file was deleted or replaced under the running server: what it commits
    now goes to a file nobody will open again, so nothing more is acknowledged."""


@dataclass(slots=True)
class _Job:
    make: Callable[[], Tx[Any]]
    future: asyncio.Future[Any]
    outcome: tuple[bool, Any] = field(default_factory=lambda: (False, WriterClosed("the transaction was not run")))


@dataclass(slots=True)
class WriterLoad:
    """Where the writer's time went since ``since`` (``time.perf_counter``): the figures that
    say whether the embedded store is what limits the server. A writer busy nearly all the
    time, with large groups, is saturated: a faster disk or PostgreSQL is the next step."""

    since: float
    # Groups committed, and the transactions they held.
    groups: int = 0
    transactions: int = 0
    # Groups that did not commit (BEGIN or COMMIT failed, e.g. locked past the busy timeout)
    # or had nothing left to run (every caller gave up): their time counts as busy too.
    other_groups: int = 0
    # BEGIN IMMEDIATE (and waiting for the write lock, on the writer's thread, when it was held).
    beginning: float = 0.0
    # The group's statements, on the event loop.
    running: float = 0.0
    # COMMIT (WAL writes and fsync) on the writer's thread.
    committing: float = 0.0

    def report(self, now: float) -> dict[str, float | int]:
        """The load as log fields: shares of the window, and milliseconds per group."""
        window = max(now - self.since, 1e-9)
        per_group = 1000 / max(self.groups + self.other_groups, 1)
        return {
            "window_s": round(window, 3),
            "groups": self.groups,
            "groups_not_committed": self.other_groups,
            "transactions_per_group": round(self.transactions / max(self.groups, 1), 1),
            "busy": round((self.beginning + self.running + self.committing) / window, 3),
            "begin_ms": round(self.beginning * per_group, 2),
            "statements_ms": round(self.running * per_group, 2),
            "commit_ms": round(self.committing * per_group, 2),
        }


@dataclass(slots=True)
class _GroupClock:
    """When one group reached each step (``time.perf_counter``); None for a step not reached."""

    started: float
    begun: float | None = None
    ran: float | None = None
    committed: bool = False


class SqliteWriter:
    """Owns the write connection, its thread and the pump task; ``start`` inside the event
    loop, ``run`` transactions, ``close`` to finish what is queued and stop."""

    def __init__(
        self,
        path: str,
        *,
        timeout: float,
        lock: asyncio.Lock | None = None,
        report_seconds: float = LOAD_REPORT_SECONDS,
    ) -> None:
        self._path = path
        self._timeout = timeout
        # Held from BEGIN to COMMIT. The store shares it with its other SQLite writes, so the
        # two write connections take turns in the process (first come, first served) instead
        # of polling each other through SQLite's busy handler.
        self._lock = lock or asyncio.Lock()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpucloud-sqlite-writer")
        self._connection: sqlite3.Connection | None = None
        # (device, inode) of the file the connection opened, checked after every commit.
        self._identity: tuple[int, int] | None = None
        self._queue: list[_Job] = []
        self._wake = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        # Kept from start(): on Python 3.11 every asyncio.get_running_loop() is a getpid()
        # system call (a fork check), and the hot path would make several per request.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        # Groups committed so far: transactions per commit is how well group commit works.
        self.commits = 0
        self.load = WriterLoad(time.perf_counter())
        self._report_seconds = report_seconds

    async def start(self) -> None:
        """Open the write connection on the writer's thread and start the pump; call inside the event loop."""
        self._loop = asyncio.get_running_loop()
        self._connection = await self._on_thread(self._open)
        self._pump = self._loop.create_task(self._run_pump(), name="sqlite-writer")
        self._pump.add_done_callback(self._pump_stopped)

    async def run(self, make: Callable[[], Tx[T]]) -> T:
        """Run the transaction ``make()`` builds in a write transaction; return its result
        once committed. ``make`` may be called twice (see the module's docstring)."""
        return await self.submit(make)

    def submit(self, make: Callable[[], Tx[T]]) -> asyncio.Future[T]:
        """Queue the transaction now; the future resolves once it is committed (or fails).

        Transactions run in the order they were submitted, whether a group boundary falls
        between them or not, and each sees what those before it wrote unless they failed
        (``Database.transact_in_order`` relies on this). A caller that cancels the future before
        its transaction starts drops it from the queue; once the transaction has started it
        commits or fails with its group.
        """
        if self._closed or self._pump is None or self._pump.done() or self._loop is None:
            raise WriterClosed("the store is closed")
        future: asyncio.Future[T] = self._loop.create_future()
        self._queue.append(_Job(make, future))
        self._wake.set()
        return future

    async def close(self) -> None:
        """Run what is queued, then close the connection and stop the thread."""
        if self._closed and (self._pump is None or self._pump.done()) and self._connection is None:
            return
        self._closed = True
        self._wake.set()
        try:
            if self._pump is not None and not self._pump.done():
                await self._pump
        finally:
            connection, self._connection = self._connection, None
            if connection is not None:
                # Closing rolls back a transaction a cancelled pump may have left open.
                await self._on_thread(connection.close)
            self._thread.shutdown(wait=False)

    def _pump_stopped(self, pump: asyncio.Task[None]) -> None:
        """However the pump ended (closed, cancelled, crashed), fail whatever still waits."""
        self._closed = True
        waiting, self._queue = self._queue, []
        _settle(waiting)

    def _open(self) -> sqlite3.Connection:
        connection = sqlite_driver.open_connection(self._path, timeout=self._timeout, shared=True)
        try:
            sqlite_driver.check_writable(connection)
            # Waits for another connection's write lock happen in _begin_waiting, on this thread.
            connection.execute("PRAGMA busy_timeout = 0")
        except BaseException:
            connection.close()
            raise
        self._identity = _identity(self._path)
        return connection

    async def _begin(self, connection: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE: tried on the loop, where the write lock is free almost always and
        taking it waits for nothing; only when another connection holds it, again on the
        writer's thread, waiting up to the busy timeout."""
        try:
            connection.execute("BEGIN IMMEDIATE")  # the connection's busy timeout is 0: no wait
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise
            await self._on_thread(self._begin_waiting, connection)

    def _begin_waiting(self, connection: sqlite3.Connection) -> None:
        connection.execute(f"PRAGMA busy_timeout = {round(self._timeout * 1000)}")
        try:
            connection.execute("BEGIN IMMEDIATE")
        finally:
            connection.execute("PRAGMA busy_timeout = 0")

    def _commit(self, connection: sqlite3.Connection) -> None:
        """COMMIT, then make sure it went to the file at the path (see StorageReplaced)."""
        connection.execute("COMMIT")
        self.ensure_same_file()

    def ensure_same_file(self) -> None:
        """Raise StorageReplaced when the path no longer names the file the writer opened (a
        blocking ``stat``: call it off the event loop)."""
        try:
            now = _identity(self._path)
        except FileNotFoundError:
            now = None
        if now != self._identity:
            raise StorageReplaced(f"{self._path} was deleted or replaced while the server ran; restart it")

    async def _on_thread(self, function: Any, *args: Any) -> Any:
        loop = self._loop or asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, function, *args)

    async def _run_pump(self) -> None:
        while True:
            if not self._queue:
                if self._closed:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            group: list[_Job] = []
            clock = _GroupClock(time.perf_counter())
            try:
                await self._commit_group(group, clock)
            except Exception as error:
                # A bug here must not stop the pump (every later caller would wait forever) nor
                # leave its transaction open under the next group.
                log.exception("sqlite_writer_failed", transactions=len(group))
                for job in group:
                    job.outcome = (False, error)
                await self._roll_back()
            finally:
                _settle(group)
                self._record(clock, len(group))

    async def _roll_back(self) -> None:
        connection = self._connection
        if connection is not None and connection.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                await self._on_thread(connection.execute, "ROLLBACK")

    def _take(self, group: list[_Job]) -> None:
        while self._queue and len(group) < MAX_GROUP:
            job = self._queue.pop(0)
            if job.future.cancelled():
                # Its caller gave up before it started (deadline, client gone): it must not
                # commit unseen, so it does not run at all.
                continue
            group.append(job)

    def _record(self, clock: _GroupClock, transactions: int) -> None:
        """Add one group, committed or not, to the load; log the load once a report is due.

        Called after the group's callers have their answers: the log line must not be able to
        turn a committed group into an error."""
        ended = time.perf_counter()
        begun = clock.begun if clock.begun is not None else ended
        ran = clock.ran if clock.ran is not None else ended
        load = self.load
        load.beginning += begun - clock.started
        load.running += ran - begun
        load.committing += ended - ran
        if clock.committed:
            load.groups += 1
            load.transactions += transactions
        else:
            load.other_groups += 1
        if ended - load.since >= self._report_seconds:
            self.load = WriterLoad(ended)
            with contextlib.suppress(Exception):
                log.info("sqlite_writer_load", **load.report(ended))

    async def _commit_group(self, group: list[_Job], clock: _GroupClock) -> None:
        """Begin, then take every transaction waiting into ``group`` (those that arrived
        while BEGIN waited for the lock ride along), run them, commit."""
        async with self._lock:
            await self._commit_group_locked(group, clock)

    async def _commit_group_locked(self, group: list[_Job], clock: _GroupClock) -> None:
        connection = self._connection
        assert connection is not None
        try:
            await self._begin(connection)
            clock.begun = time.perf_counter()
            self._take(group)
            if not group:
                connection.execute("ROLLBACK")  # every caller had given up: nothing to do
                return
            if not _run_optimistically(connection, group):
                # A transaction failed after writing: undo the whole group. Alone, its failure
                # is the group's outcome; otherwise run the group again, each in a savepoint.
                connection.execute("ROLLBACK")
                if len(group) == 1:
                    return
                await self._begin(connection)
                _run_with_savepoints(connection, group)
            clock.ran = time.perf_counter()
            await self._on_thread(self._commit, connection)
            self.commits += 1
            clock.committed = True
        except StorageReplaced as error:
            log.error("sqlite_database_replaced", error=str(error), transactions=len(group))
            for job in group:
                job.outcome = (False, error)
        except sqlite3.Error as error:
            # BEGIN, a savepoint or COMMIT failed (locked past the busy timeout, disk full, I/O
            # error): nothing of the group is durable, so nobody hears "done".
            if not group:
                self._take(group)
            log.warning("sqlite_group_failed", error=str(error), transactions=len(group))
            await self._roll_back()
            for job in group:
                job.outcome = (False, error)
        except BaseException:
            # Cancelled mid-commit (shutdown): the outcome is unknown, so nobody hears "done".
            for job in group:
                job.outcome = (False, WriterClosed("the store closed while the transaction committed"))
            raise


def _run_optimistically(connection: sqlite3.Connection, group: list[_Job]) -> bool:
    """Run each transaction with no savepoint; False as soon as one fails after writing."""
    for job in group:
        changes = connection.total_changes
        job.outcome = _attempt(connection, job.make)
        if not job.outcome[0] and connection.total_changes != changes:
            return False
    return True


def _run_with_savepoints(connection: sqlite3.Connection, group: list[_Job]) -> None:
    """Run each transaction in a savepoint, undoing only the ones that fail."""
    for job in group:
        connection.execute("SAVEPOINT job")
        job.outcome = _attempt(connection, job.make)
        if not job.outcome[0]:
            connection.execute("ROLLBACK TO job")
        connection.execute("RELEASE job")


def _attempt(connection: sqlite3.Connection, make: Callable[[], Tx[Any]]) -> tuple[bool, Any]:
    """(True, result) or (False, the exception the transaction, or building it, raised)."""
    try:
        return True, run_on_connection(connection, make())
    except sqlite3.Error as error:
        if not connection.in_transaction:
            # SQLite rolled the whole transaction back (e.g. SQLITE_FULL): the group is lost.
            raise
        return False, error
    except Exception as error:  # handed to the caller, who raises it
        return False, error


def _identity(path: str) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_dev, status.st_ino


def _settle(jobs: list[_Job]) -> None:
    for job in jobs:
        if job.future.done():
            continue  # the caller stopped waiting (cancelled); the outcome stands regardless
        ok, value = job.outcome
        if ok:
            job.future.set_result(value)
        else:
            job.future.set_exception(value)

"""The SQLite writer: one thread, one connection, whole transactions in one hop, group commit.

Hot-path transactions (store/tx.py) are queued here from the event loop. The thread takes
every transaction waiting, runs them one after another inside one ``BEGIN IMMEDIATE`` (each
in its own savepoint, so one that fails leaves no trace and does not disturb the others),
commits once, and only then answers their callers: nothing is acknowledged before it is
durable (``synchronous=FULL``), and under load a single fsync covers many requests.

Why a thread of its own: SQLite has one write lock per database, so one writer loses no
parallelism, and running the transaction's statements as plain ``sqlite3`` calls on that
thread costs a few microseconds each, where each statement through SQLAlchemy's async engine
costs a round trip through the event loop and the driver's thread (bench/store_path.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from services.store import sqlite_driver
from services.store.tx import Tx, run_on_connection

log = structlog.get_logger(__name__)

T = TypeVar("T")
# Transactions per commit at most: bounds how long one commit keeps the others waiting.
MAX_GROUP = 64


class WriterClosed(RuntimeError):
    """The store is closing: the transaction was not run."""


@dataclass(slots=True)
class _Job:
    tx: Tx[Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    outcome: tuple[bool, Any] = (False, None)


class SqliteWriter:
    """Owns the writer thread; ``start`` once, ``run`` transactions, ``close`` to stop."""

    def __init__(self, path: str, *, timeout: float) -> None:
        self._path = path
        self._timeout = timeout
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="gpucloud-sqlite-writer", daemon=True)
        self._closed = False

    def start(self) -> None:
        self._thread.start()

    async def run(self, tx: Tx[T]) -> T:
        """Run ``tx`` in a write transaction; return its result once committed."""
        if self._closed:
            tx.close()
            raise WriterClosed("the store is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(tx, future, loop))
        return await future

    async def close(self) -> None:
        """Run what is queued, then stop the thread."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(None)
        await asyncio.to_thread(self._thread.join)

    # -- the writer thread ---------------------------------------------------------------

    def _serve(self) -> None:
        connection = sqlite_driver.open_connection(self._path, timeout=self._timeout)
        try:
            stopping = False
            while not stopping:
                first = self._jobs.get()
                if first is None:
                    break
                group = [first]
                while len(group) < MAX_GROUP:
                    try:
                        job = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if job is None:
                        stopping = True
                        break
                    group.append(job)
                self._commit_group(connection, group)
        finally:
            connection.close()

    def _commit_group(self, connection: sqlite3.Connection, group: list[_Job]) -> None:
        try:
            connection.execute("BEGIN IMMEDIATE")
            if len(group) == 1:
                # Alone: the transaction itself is the savepoint.
                group[0].outcome = _attempt(connection, group[0].tx)
                if not group[0].outcome[0]:
                    connection.execute("ROLLBACK")
                    _answer(group)
                    return
            else:
                for job in group:
                    connection.execute("SAVEPOINT job")
                    job.outcome = _attempt(connection, job.tx)
                    if not job.outcome[0]:
                        connection.execute("ROLLBACK TO job")
                    connection.execute("RELEASE job")
            connection.execute("COMMIT")
        except sqlite3.Error as error:
            # BEGIN, a savepoint or COMMIT failed (locked past the busy timeout, disk full, I/O
            # error): nothing of the group is durable, so nobody hears "done".
            log.warning("sqlite_group_failed", error=str(error), transactions=len(group))
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            for job in group:
                job.outcome = (False, error)
        _answer(group)


def _attempt(connection: sqlite3.Connection, tx: Tx[Any]) -> tuple[bool, Any]:
    """(True, result) or (False, the exception the transaction raised)."""
    try:
        return True, run_on_connection(connection, tx)
    except sqlite3.Error as error:
        if isinstance(error, sqlite3.OperationalError) and not connection.in_transaction:
            # SQLite rolled the whole transaction back (e.g. SQLITE_FULL): the group is lost.
            raise
        return False, error
    except Exception as error:
        return False, error


def _answer(group: list[_Job]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
    for job in group:
        by_loop.setdefault(job.loop, []).append(job)
    for loop, jobs in by_loop.items():
        # A loop that has closed raises RuntimeError: its callers are gone.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, jobs)


def _settle(jobs: list[_Job]) -> None:
    for job in jobs:
        if job.future.done():
            continue  # the caller stopped waiting (cancelled); the outcome stands regardless
        ok, value = job.outcome
        if ok:
            job.future.set_result(value)
        else:
            job.future.set_exception(value)

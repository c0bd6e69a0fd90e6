"""SQLite reads in one hop: each read transaction runs whole on a reader thread.

``Database.query`` on SQLite hands the read step (store/tx.py) to a small pool of threads,
each with a plain ``sqlite3`` connection of its own: ``BEGIN``, the step's statements and the
``ROLLBACK`` that ends the snapshot run there together, and the event loop hears once, when the
answer is ready. Through SQLAlchemy's async session the same read took a loop round trip for
the begin, each statement and the rollback, and while the loop is busy each round trip waits
for it: under a fleet converging, reads through its eight pooled connections were what capped
the server (docs/performance.md).

WAL lets every reader see its own snapshot beside the writer's transaction; a reader never
writes (each connection is opened ``query_only``).
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from services.store import sqlite_driver
from services.store.tx import Tx, run_on_connection

T = TypeVar("T")

# Reads in flight at most: SQLite answers reads from its page cache in microseconds, so more
# threads would only trade the GIL more often.
READERS = 4


class SqliteReaders:
    """Read transactions on ``size`` threads, each over a connection it keeps between reads."""

    def __init__(self, path: str, *, timeout: float, size: int = READERS) -> None:
        self._path = path
        self._timeout = timeout
        self._threads = ThreadPoolExecutor(size, thread_name_prefix="sqlite-reader")
        # Connections between reads; a thread opens one when none is idle.
        self._idle: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._opened: list[sqlite3.Connection] = []
        self._opening = threading.Lock()

    async def query(self, step: Tx[T]) -> T:
        """Run ``step`` in one read-only snapshot on a reader thread; return what it returns."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, self._read, step)

    def _read(self, step: Tx[T]) -> T:
        connection = self._connection()
        try:
            connection.execute("BEGIN")
            try:
                result = run_on_connection(connection, step)
            finally:
                connection.execute("ROLLBACK")
        except sqlite3.Error:
            # Whatever broke, a fresh connection serves the next read.
            self._discard(connection)
            raise
        self._idle.put(connection)
        return result

    def _connection(self) -> sqlite3.Connection:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        connection = sqlite_driver.open_connection(self._path, timeout=self._timeout, shared=True)
        connection.execute("PRAGMA query_only=ON")
        with self._opening:
            self._opened.append(connection)
        return connection

    def _discard(self, connection: sqlite3.Connection) -> None:
        with self._opening:
            self._opened.remove(connection)
        connection.close()

    async def close(self) -> None:
        """Wait for the reads in flight, then close every connection and stop the threads."""
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        # Off the loop: the last connection to close checkpoints the write-ahead log.
        self._threads.shutdown(wait=True)
        with self._opening:
            opened, self._opened = self._opened, []
        for connection in opened:
            connection.close()

"""SQLite connections: how every one is opened, and an aiosqlite connection whose cursors do
one thread round trip per statement.

``open_connection`` sets the pragmas every connection needs (WAL, foreign keys,
``synchronous=FULL``, in-memory temporary journals); the SQLite writer (store/writer.py) uses
it directly, the SQLAlchemy engines (reads, and the schema migrations) through ``connector``.

aiosqlite runs every cursor call on the connection's thread: creating the cursor, executing,
fetching and closing are four round trips between the event loop and that thread for each
statement, and those round trips cost more than SQLite's own work on a small statement. This
cursor runs execute + fetchall + close as one function on the thread and serves the rows it
brought back from memory. Rows are always fetched eagerly, so it must not be used for server-side
(streaming) cursors, which the control plane never asks for.

It plugs into SQLAlchemy's aiosqlite dialect through ``create_async_engine(async_creator=...)``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import aiosqlite

from services.data_dir import PRIVATE_FILE, narrow_to_owner

_Description = tuple[tuple[str, None, None, None, None, None, None], ...] | None


class _Outcome:
    __slots__ = ("description", "lastrowid", "rowcount", "rows")

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self.description: _Description = cursor.description
        self.rows: list[Any] = cursor.fetchall() if cursor.description else []
        self.rowcount = cursor.rowcount
        self.lastrowid = cursor.lastrowid
        cursor.close()


def _run(connection: sqlite3.Connection, sql: str, parameters: Any) -> _Outcome:
    return _Outcome(connection.execute(sql, parameters))


def _run_many(connection: sqlite3.Connection, sql: str, parameters: Iterable[Any]) -> _Outcome:
    return _Outcome(connection.executemany(sql, parameters))


class OneHopCursor:
    """The subset of aiosqlite's Cursor that SQLAlchemy's adapter uses."""

    def __init__(self, connection: OneHopConnection) -> None:
        self._connection = connection
        self._outcome: _Outcome | None = None
        self.arraysize = 1

    async def __aenter__(self) -> OneHopCursor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def execute(self, sql: str, parameters: Any = ()) -> OneHopCursor:
        """Run ``sql`` on the connection's thread and bring back all its rows, in one round trip."""
        self._outcome = await self._connection.on_thread(_run, sql, parameters)
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> OneHopCursor:
        """Run ``sql`` once per parameter set on the connection's thread, in one round trip."""
        self._outcome = await self._connection.on_thread(_run_many, sql, parameters)
        return self

    def _take(self, count: int | None) -> list[Any]:
        if self._outcome is None:
            return []
        rows = self._outcome.rows
        if count is None:
            self._outcome.rows = []
            return rows
        self._outcome.rows = rows[count:]
        return rows[:count]

    async def fetchall(self) -> list[Any]:
        """The rows not fetched yet, from memory."""
        return self._take(None)

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        """Up to ``size`` (default ``arraysize``) of the rows not fetched yet."""
        return self._take(size or self.arraysize)

    async def fetchone(self) -> Any:
        """The next row, or None when none is left."""
        rows = self._take(1)
        return rows[0] if rows else None

    async def close(self) -> None:
        """Drop what is left of the result; nothing runs on the thread."""
        self._outcome = None

    @property
    def description(self) -> _Description:
        """The last statement's DB-API column description; None for one without result columns, or before any."""
        return self._outcome.description if self._outcome else None

    @property
    def rowcount(self) -> int:
        """Rows the last statement changed, as sqlite3 counts them (-1 for a query); -1 before any statement."""
        return self._outcome.rowcount if self._outcome else -1

    @property
    def lastrowid(self) -> int | None:
        """The rowid sqlite3 reports for the last statement; None before any statement."""
        return self._outcome.lastrowid if self._outcome else None


class OneHopConnection(aiosqlite.Connection):
    """aiosqlite.Connection with one-round-trip cursors."""

    def cursor(self) -> OneHopCursor:  # type: ignore[override]
        """A one-hop cursor on this connection."""
        return OneHopCursor(self)

    async def on_thread(self, function: Callable[..., _Outcome], *args: Any) -> _Outcome:
        """Run ``function(sqlite3_connection, *args)`` on the connection's thread."""
        outcome: _Outcome = await self._execute(lambda: function(self._conn, *args))  # type: ignore[no-untyped-call]
        return outcome


def _use_wal(connection: sqlite3.Connection, timeout: float) -> None:
    """Switch the database to WAL (a persistent setting), waiting out concurrent openers.

    The switch needs an exclusive lock and SQLite reports "locked" at once instead of calling
    the busy handler, so two processes opening a fresh file together need this retry. It runs
    on the connection's own thread, where sleeping blocks nothing else.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def open_connection(path: str, *, timeout: float, shared: bool = False, create: bool = False) -> sqlite3.Connection:
    """A sqlite3 connection to ``path`` in WAL mode, with foreign keys on and
    ``synchronous=FULL`` (an acknowledged commit survives power loss, not only a process
    crash), in autocommit mode: whoever uses it issues BEGIN / BEGIN IMMEDIATE itself.

    ``shared``: the caller uses it from more than one thread, one at a time. ``create``: make
    the file if it is missing. Only the store's first connection does: a file deleted under a
    running server must fail the connections opened after it (SQLITE_CANTOPEN), not be
    silently replaced by an empty database.
    """
    target = path if create else Path(path).resolve().as_uri() + "?mode=rw"
    connection = sqlite3.connect(
        target, timeout=timeout, isolation_level=None, check_same_thread=not shared, uri=not create
    )
    _use_wal(connection, timeout)
    connection.execute("PRAGMA foreign_keys=ON")
    connection.execute("PRAGMA synchronous=FULL")
    # Savepoints and multi-row statements keep undo records in temporary journals: in memory
    # they are a memcpy, on disk a write() per page.
    connection.execute("PRAGMA temp_store=MEMORY")
    return connection


def check_writable(connection: sqlite3.Connection) -> None:
    """Raise ``sqlite3.OperationalError`` when SQLite can read the connection's file but never write it.

    SQLite opens a file it may not write read-only without a word, and in WAL mode even
    ``BEGIN IMMEDIATE`` succeeds on it (its lock lives in the ``-shm`` file): only the first page
    written fails. A server on such a file would say SERVING and answer every write UNAVAILABLE.
    So write one page, the header's ``user_version`` set to the value it has, and roll it back.
    """
    (version,) = connection.execute("PRAGMA user_version").fetchone()
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(f"PRAGMA user_version = {int(version)}")
    except sqlite3.OperationalError as error:
        # The primary code: SQLITE_READONLY_CANTLOCK, _RECOVERY and the rest are read-only too.
        if error.sqlite_errorcode & 0xFF != sqlite3.SQLITE_READONLY:
            raise
        raise sqlite3.OperationalError(
            "the file is read-only for this server: it reads it but can write nothing"
        ) from error
    finally:
        if connection.in_transaction:
            connection.execute("ROLLBACK")


# Beside the database, SQLite keeps its write-ahead log and the index of it (shared memory).
WAL_SUFFIXES = ("-wal", "-shm")


def prepare_file(path: str, *, timeout: float) -> None:
    """Make the database file at ``path`` ready to serve from: created (empty, which SQLite reads
    as an empty database) with mode ``PRIVATE_FILE`` if it does not exist, narrowed to its owner
    if it does and group or others may use it, and switched to WAL mode.

    The database holds token digests, the page-token signing key and every tenant's data.
    SQLite would create it 0644 less the umask, readable by everyone on most systems, and it
    gives the ``-wal`` and ``-shm`` files it makes beside it the database's mode; those already
    there (another process has the database open) are narrowed with it.
    """
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        for private in (path, *(path + suffix for suffix in WAL_SUFFIXES)):
            narrow_to_owner(Path(private))
    else:
        try:
            os.fchmod(descriptor, PRIVATE_FILE)  # the umask may have taken the owner's write too
        finally:
            os.close(descriptor)
    open_connection(path, timeout=timeout, create=True).close()


def connector(path: str, *, timeout: float) -> Callable[[], OneHopConnection]:
    """An ``async_creator`` for SQLAlchemy that opens ``path`` (see ``open_connection``) with
    one-hop cursors."""

    def connect() -> sqlite3.Connection:
        return open_connection(path, timeout=timeout)

    def create() -> OneHopConnection:
        connection = OneHopConnection(connect, 64)
        # Like aiosqlite.connect under SQLAlchemy: a forgotten connection must not hold the
        # interpreter open at exit.
        connection._thread.daemon = True
        return connection

    return create

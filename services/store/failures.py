"""Which database and storage failures a caller may retry, expressed as domain errors.

The interceptor asks ``translate`` about any exception a handler did not handle: a lost
connection, an exhausted pool or a SQLite database locked past the busy timeout is
UNAVAILABLE (retry the call); so is a full or failing disk under SQLite or the metrics store,
with the cause in the reason (STORAGE_FULL, STORAGE_ERROR), since the call can succeed once an
operator frees space; a PostgreSQL deadlock or serialization failure, or a constraint that
refused a write because a concurrent transaction got there first (``tx.Conflict``), is ABORTED
(retry the sequence); anything else stays INTERNAL.
"""

from __future__ import annotations

import errno
import sqlite3
import sys

from sqlalchemy import exc

from services.errors import Aborted, ApiError, Unavailable
from services.store.tx import Conflict
from services.store.writer import StorageReplaced, WriterClosed
from tsdb import TsdbError, WalError

# SQLSTATE serialization_failure and deadlock_detected.
_RETRY_SQLSTATES = frozenset({"40001", "40P01"})
# The server is shutting down, restarting or starting up (57P01-57P03), or refuses more
# connections (53300): a connection, new or pooled, could not be had. Class 08 (connection
# exceptions) is matched by its prefix.
_UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
# Primary result codes (the low byte of an extended one).
_SQLITE_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_SQLITE_STORAGE = frozenset({sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN})


def _full() -> Unavailable:
    return Unavailable(reason="STORAGE_FULL", message="the server's disk is full; retry once space is freed")


def _storage_error(detail: str) -> Unavailable:
    return Unavailable(reason="STORAGE_ERROR", message=f"the server's storage failed ({detail}); retry later")


def _unwrapped(error: BaseException) -> BaseException:
    """The driver's own exception, when SQLAlchemy wrapped it."""
    return error.orig if isinstance(error, exc.DBAPIError) and error.orig is not None else error


def _sqlite_code(error: BaseException) -> int | None:
    """The primary SQLite result code of ``error``, raw or wrapped by SQLAlchemy."""
    code = getattr(_unwrapped(error), "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def _disk_full(error: BaseException) -> bool:
    """ENOSPC, raised as it is or as the cause of a metrics store's file error (its log's
    WalError, its catalog's TsdbError)."""
    cause = error.__cause__ if isinstance(error, TsdbError) else error
    return isinstance(cause, OSError) and cause.errno == errno.ENOSPC


def _sqlstate(error: BaseException) -> str | None:
    """The PostgreSQL SQLSTATE of ``error``, raw or wrapped by SQLAlchemy."""
    driver = _unwrapped(error)
    state = getattr(driver, "sqlstate", None) or getattr(driver, "pgcode", None)
    return state if isinstance(state, str) else None


def _server_unreachable(error: BaseException) -> bool:
    state = _sqlstate(error)
    return state is not None and (state in _UNAVAILABLE_SQLSTATES or state.startswith("08"))


def _driver_failure(error: BaseException) -> ApiError | None:
    """A PostgreSQL connection that failed or a transaction the server aborted; a connection
    lost on either database; a constraint a concurrent transaction got to first."""
    # From Database.transact on PostgreSQL, which uses asyncpg directly. A process that never loaded
    # the driver (SQLite) cannot be holding one of its errors.
    asyncpg = sys.modules.get("asyncpg")
    if asyncpg is not None and isinstance(error, asyncpg.PostgresConnectionError | asyncpg.InterfaceError):
        return Unavailable(reason="DATABASE_UNAVAILABLE", message="the database is unreachable; retry")
    # Raw from asyncpg (Database.transact) or wrapped by SQLAlchemy (Database.query), alike.
    if _sqlstate(error) in _RETRY_SQLSTATES:
        return Aborted(reason="DATABASE_CONFLICT", message="the database aborted the transaction; retry it")
    if isinstance(error, ConnectionError):
        return Unavailable(reason="DATABASE_UNAVAILABLE", message="the database is unreachable; retry")
    if isinstance(error, Conflict):
        return Aborted(reason="DATABASE_CONFLICT", message="a concurrent request changed the same data; retry it")
    return None


def _storage_failure(error: BaseException) -> ApiError | None:
    """A full or failing disk under SQLite or the metrics store, a SQLite database locked past
    the busy timeout, or a database file replaced under the server."""
    sqlite_code = _sqlite_code(error)
    if sqlite_code == sqlite3.SQLITE_FULL or _disk_full(error):
        return _full()
    if sqlite_code in _SQLITE_STORAGE:
        return _storage_error(str(_unwrapped(error)))
    if isinstance(error, sqlite3.OperationalError) and sqlite_code in _SQLITE_BUSY:
        # From the SQLite writer (store/writer.py), which uses sqlite3 directly: another
        # process held the database past the busy timeout.
        return Unavailable(reason="DATABASE_UNAVAILABLE", message="the database is busy; retry")
    if isinstance(error, StorageReplaced | WalError):
        return _storage_error(str(error))
    if isinstance(error, TsdbError) and isinstance(error.__cause__, OSError):
        return _storage_error(str(error))  # a metrics file the disk refused (the catalog's)
    return None


def _server_gone(error: BaseException) -> ApiError | None:
    """A store that is stopping, or a database server that is restarting, full or unreachable."""
    if isinstance(error, WriterClosed):
        return Unavailable(reason="DATABASE_UNAVAILABLE", message="the server is stopping; retry")
    if _server_unreachable(error):
        return Unavailable(reason="DATABASE_UNAVAILABLE", message="the database is restarting or full; retry")
    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        # The connection broke under a read (a server restart, a terminated session);
        # SQLAlchemy threw it away, and the next call gets a fresh one.
        return Unavailable(reason="DATABASE_UNAVAILABLE", message="the database connection was lost; retry")
    if isinstance(error, exc.OperationalError | exc.InterfaceError | exc.TimeoutError):
        return Unavailable(reason="DATABASE_UNAVAILABLE", message="the database is unreachable or busy; retry")
    return None


# Asked in this order: the first that recognizes the error decides.
_CLASSIFIERS = (_driver_failure, _storage_failure, _server_gone)


def translate(error: BaseException) -> ApiError | None:
    """A retryable domain error for a database failure, or None if it is not one."""
    for classify in _CLASSIFIERS:
        translated = classify(error)
        if translated is not None:
            return translated
    return None

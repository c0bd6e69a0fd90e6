"""Which database failures a caller may retry, expressed as domain errors.

The interceptor asks ``translate`` about any exception a handler did not handle: a lost
connection, an exhausted pool or a SQLite database locked past the busy timeout is
UNAVAILABLE (retry the call); a PostgreSQL deadlock or serialization failure, or a constraint
that refused a write because a concurrent transaction got there first (``tx.Conflict``), is
ABORTED (retry the sequence); anything else stays INTERNAL.
"""

from __future__ import annotations

import sqlite3
import sys

from sqlalchemy import exc

from services.errors import Aborted, ApiError, Unavailable
from services.store.tx import Conflict
from services.store.writer import WriterClosed

# SQLSTATE serialization_failure and deadlock_detected.
_RETRY_SQLSTATES = frozenset({"40001", "40P01"})
# Primary result codes (the low byte of an extended one).
_SQLITE_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def translate(error: BaseException) -> ApiError | None:
    """A retryable domain error for a database failure, or None if it is not one."""
    # From Store.transact on PostgreSQL, which uses asyncpg directly. A process that never loaded
    # the driver (SQLite) cannot be holding one of its errors.
    asyncpg = sys.modules.get("asyncpg")
    if asyncpg is not None:
        if isinstance(error, asyncpg.PostgresError) and getattr(error, "sqlstate", None) in _RETRY_SQLSTATES:
            return Aborted(reason="DATABASE_CONFLICT", message="the database aborted the transaction; retry it")
        if isinstance(error, asyncpg.PostgresConnectionError | asyncpg.InterfaceError):
            return Unavailable(reason="DATABASE_UNAVAILABLE", message="the database is unreachable; retry")
    if isinstance(error, ConnectionError):
        return Unavailable(reason="DATABASE_UNAVAILABLE", message="the database is unreachable; retry")
    if isinstance(error, Conflict):
        return Aborted(reason="DATABASE_CONFLICT", message="a concurrent request changed the same data; retry it")
    sqlite_code = getattr(error, "sqlite_errorcode", None)
    if isinstance(error, sqlite3.OperationalError) and sqlite_code is not None and sqlite_code & 0xFF in _SQLITE_BUSY:
        # From the SQLite writer (store/writer.py), which uses sqlite3 directly: another
        # process held the database past the busy timeout.
        return Unavailable(reason="DATABASE_UNAVAILABLE", message="the database is busy; retry")
    if isinstance(error, WriterClosed):
        return Unavailable(reason="DATABASE_UNAVAILABLE", message="the server is stopping; retry")
    if isinstance(error, exc.DBAPIError):
        sqlstate = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
        if sqlstate in _RETRY_SQLSTATES:
            return Aborted(reason="DATABASE_CONFLICT", message="the database aborted the transaction; retry it")
    if isinstance(error, exc.OperationalError | exc.InterfaceError | exc.TimeoutError):
        return Unavailable(reason="DATABASE_UNAVAILABLE", message="the database is unreachable or busy; retry")
    return None

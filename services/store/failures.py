"""Which database failures a caller may retry, expressed as domain errors.

The interceptor asks ``translate`` about any exception a handler did not handle: a lost
connection or an exhausted pool is UNAVAILABLE (retry the call), a PostgreSQL deadlock or
serialization failure is ABORTED (retry the sequence); anything else stays INTERNAL.
"""

from __future__ import annotations

from sqlalchemy import exc

from services.errors import Aborted, ApiError, Unavailable

# SQLSTATE serialization_failure and deadlock_detected.
_RETRY_SQLSTATES = frozenset({"40001", "40P01"})


def translate(error: BaseException) -> ApiError | None:
    """A retryable domain error for a database failure, or None if it is not one."""
    if isinstance(error, exc.DBAPIError):
        sqlstate = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
        if sqlstate in _RETRY_SQLSTATES:
            return Aborted(reason="DATABASE_CONFLICT", message="the database aborted the transaction; retry it")
    if isinstance(error, exc.OperationalError | exc.InterfaceError | exc.TimeoutError):
        return Unavailable(reason="DATABASE_UNAVAILABLE", message="the database is unreachable or busy; retry")
    return None

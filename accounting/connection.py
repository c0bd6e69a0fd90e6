"""The DuckDB connections the engine runs on: one in-memory database per process, a fresh
connection to it per run.

Opening an in-memory database costs a large share of a small invoice run; a connection to an
open one (``cursor()``) costs next to nothing. Each run still gets its own connection, and
with it its own temporary tables, registered Arrow tables and variables (DuckDB keeps those per
connection), so concurrent runs in threads do not see each other's data, and closing the
connection frees its tables.
"""

from __future__ import annotations

import os
import threading

import duckdb

_lock = threading.Lock()
_database: duckdb.DuckDBPyConnection | None = None
_owner_pid = 0


def connect() -> duckdb.DuckDBPyConnection:
    """A fresh connection to this process's in-memory database, which uses every core."""
    global _database, _owner_pid
    with _lock:
        # A forked child must not reuse its parent's database: DuckDB's threads did not fork.
        if _database is None or _owner_pid != os.getpid():
            _database = duckdb.connect(":memory:")
            _database.execute(f"SET threads = {os.cpu_count() or 1}")
            _owner_pid = os.getpid()
        return _database.cursor()

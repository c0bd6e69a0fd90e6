"""SQLite reads run whole on reader threads (store/readers.py)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from services.store.engine import Database
from services.store.readers import SqliteReaders
from services.store.tx import Sql, Tx


@pytest.fixture
async def sqlite_file(tmp_path: Path) -> str:
    """A SQLite database with the schema, whichever database the run's other tests use."""
    path = str(tmp_path / "readers.db")
    await (await Database.open(f"sqlite+aiosqlite:///{path}")).close()
    return path


def tenants() -> Tx[list[str]]:
    result = yield Sql("SELECT tenant_id FROM tenants ORDER BY tenant_id")
    return [str(row[0]) for row in result.rows]


def add(tenant_id: str) -> Tx[None]:
    yield Sql("INSERT INTO tenants (tenant_id, display_name, created_us) VALUES (:id, '', 1)", {"id": tenant_id})


def commit(path: str, tenant_id: str) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO tenants (tenant_id, display_name, created_us) VALUES (?, '', 1)", (tenant_id,))


async def test_a_read_sees_what_was_committed_and_runs_off_the_loop(sqlite_file: str) -> None:
    readers = SqliteReaders(sqlite_file, timeout=5)
    threads: list[str] = []

    def where() -> Tx[list[str]]:
        threads.append(threading.current_thread().name)
        return (yield from tenants())

    try:
        assert await readers.query(tenants()) == []
        commit(sqlite_file, "acme")
        assert await readers.query(where()) == ["acme"]
        assert [name.split("_")[0] for name in threads] == ["sqlite-reader"]
    finally:
        await readers.close()


async def test_one_read_is_one_snapshot_while_another_connection_commits(sqlite_file: str) -> None:
    """Statements of one read see the database as it was at its first statement."""
    readers = SqliteReaders(sqlite_file, timeout=5)

    def twice() -> Tx[tuple[list[str], list[str]]]:
        first = yield from tenants()
        commit(sqlite_file, "late")  # on the reader's thread, between the two statements
        return first, (yield from tenants())

    try:
        assert await readers.query(twice()) == ([], [])
        assert await readers.query(tenants()) == ["late"]
    finally:
        await readers.close()


async def test_a_reader_writes_nothing_and_the_next_read_still_runs(sqlite_file: str) -> None:
    readers = SqliteReaders(sqlite_file, timeout=5)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await readers.query(add("sneaky"))
        assert await readers.query(tenants()) == []
    finally:
        await readers.close()


async def test_close_waits_for_reads_in_flight(sqlite_file: str) -> None:
    readers = SqliteReaders(sqlite_file, timeout=5)
    started, release = threading.Event(), threading.Event()

    def slow() -> Tx[list[str]]:
        started.set()
        release.wait(5)
        return (yield from tenants())

    read = asyncio.ensure_future(readers.query(slow()))
    await asyncio.to_thread(started.wait, 5)

    async def close() -> bool:
        """Close; whether the read had ended by the time close returned."""
        await readers.close()
        return read.done()

    closing = asyncio.ensure_future(close())
    release.set()
    assert await closing
    assert await read == []

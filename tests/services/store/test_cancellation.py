"""A caller cancelled mid-transaction (a deadline, a client gone) must not poison later ones.

On PostgreSQL a transaction cancelled while asyncpg is sending BEGIN must not leave its pooled
connection inside the transaction: the next transaction on it would be a savepoint whose
"commit" commits nothing, and acknowledged writes would vanish. Here hundreds of transactions are
cancelled at random moments, then every connection the pool takes back is checked, and every
later acknowledged write must be visible from a connection of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from functools import partial
from typing import Any

import pytest
from sqlalchemy import event, text

from services.store.engine import Database, null_pool_engine
from services.store.tx import Sql, Tx

CANCELLED = 300


def add_tenant(tenant_id: str) -> Tx[str]:
    yield Sql("SELECT tenant_id FROM tenants WHERE tenant_id = :id", {"id": tenant_id})
    yield Sql(
        "INSERT INTO tenants (tenant_id, display_name, created_us) VALUES (:id, 'cancellation test', 1)",
        {"id": tenant_id},
    )
    return tenant_id


# Turns of the event loop a call may run before it is cancelled: a transaction here takes 45-220
# (each turn while it waits on SQLite's thread or PostgreSQL is one poll), so a random count in
# this range lands before it starts, anywhere inside it, or after it ended.
TURNS = 250


async def loop_turns(count: int) -> None:
    """Let the event loop run ``count`` times: a point in a call's life chosen by the scheduler's
    progress rather than the clock, so the test neither waits on time nor depends on speed."""
    loop = asyncio.get_running_loop()
    for _ in range(count):
        turn = loop.create_future()
        loop.call_soon(turn.set_result, None)
        await turn


async def cancel_soon(store: Database, tenant_id: str, rng: random.Random) -> None:
    call = asyncio.ensure_future(store.transact(partial(add_tenant, tenant_id)))
    await loop_turns(rng.randrange(TURNS))
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await call


async def test_cancelled_transactions_leave_no_connection_inside_a_transaction(store: Database) -> None:
    returned_dirty: list[str] = []
    if store.dialect == "postgresql":

        @event.listens_for(store._write_engine.sync_engine.pool, "checkin")  # the pool behind transact
        def on_checkin(dbapi_connection: Any, record: Any) -> None:
            raw = None if dbapi_connection is None else dbapi_connection.driver_connection
            # asyncpg keeps the outermost transaction it believes open in _top_xact.
            if raw is not None and (raw.is_in_transaction() or raw._top_xact is not None):
                returned_dirty.append(repr(raw._top_xact))

    rng = random.Random(7)
    # One at a time: each cancellation lands somewhere in its transaction's few milliseconds,
    # so some land while BEGIN is on the wire.
    for i in range(CANCELLED):
        await cancel_soon(store, f"gone-{i}", rng)
    await store.settled()  # transactions whose callers left have finished or never begun
    assert returned_dirty == []

    # Acknowledged writes after the storm are committed: visible from a connection of its own.
    checker = null_pool_engine(store.url)
    try:
        for i in range(20):
            assert await store.transact(partial(add_tenant, f"kept-{i}")) == f"kept-{i}"
            async with checker.connect() as connection:
                found = await connection.scalar(
                    text("SELECT count(*) FROM tenants WHERE tenant_id = :id"), {"id": f"kept-{i}"}
                )
            assert found == 1, f"kept-{i} was acknowledged but is not committed"
        if store.dialect == "postgresql":
            async with checker.connect() as connection:
                stuck = await connection.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND state LIKE 'idle in transaction%'"
                    )
                )
            assert stuck == 0
    finally:
        await checker.dispose()


async def add_tenant_in_session(store: Database, tenant_id: str) -> str:
    """The same write through ``Database.write`` (an SQLAlchemy session), as tenants and nodes do."""
    async with store.write() as session:
        await (await session.connection()).execute(
            text("SELECT tenant_id FROM tenants WHERE tenant_id = :id").bindparams(id=tenant_id)
        )
        await (await session.connection()).execute(
            text(
                "INSERT INTO tenants (tenant_id, display_name, created_us) VALUES (:id, 'cancellation test', 1)"
            ).bindparams(id=tenant_id)
        )
    return tenant_id


async def test_cancelled_session_writes_end_cleanly(store: Database, caplog: pytest.LogCaptureFixture) -> None:
    """A cancellation that lands as a session write commits or rolls back must not interrupt
    that: SQLAlchemy logged the interrupted reset as an error and dropped the connection (20 of
    300 on SQLite), and acknowledged writes after the storm must all be committed."""
    rng = random.Random(11)
    with caplog.at_level(logging.ERROR, logger="sqlalchemy.pool"):
        for i in range(CANCELLED):
            call = asyncio.ensure_future(add_tenant_in_session(store, f"gone-{i}"))
            await loop_turns(rng.randrange(TURNS))
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
        await store.settled()
    assert [r.getMessage() for r in caplog.records if r.name.startswith("sqlalchemy.pool")] == []

    checker = null_pool_engine(store.url)
    try:
        for i in range(20):
            assert await add_tenant_in_session(store, f"kept-{i}") == f"kept-{i}"
            async with checker.connect() as connection:
                found = await connection.scalar(
                    text("SELECT count(*) FROM tenants WHERE tenant_id = :id"), {"id": f"kept-{i}"}
                )
            assert found == 1, f"kept-{i} was acknowledged but is not committed"
    finally:
        await checker.dispose()


async def test_a_caller_giving_up_on_settled_leaves_the_transactions_running(store: Database) -> None:
    """settled() (and close()) wait for transactions whose callers left; one who stops waiting
    there (a timeout) must not cancel them, or a commit already promised to nobody but still
    under way would be cut short."""
    release = asyncio.Event()

    async def committing() -> None:
        await release.wait()

    in_flight = asyncio.get_running_loop().create_task(committing())
    store._in_flight.add(in_flight)
    in_flight.add_done_callback(store._forget)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(store.settled(), 0.05)
    assert not in_flight.done()
    release.set()
    await store.settled()
    assert in_flight.done()
    assert not in_flight.cancelled()

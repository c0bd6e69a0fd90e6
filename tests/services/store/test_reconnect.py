"""Pooled PostgreSQL connections that the server closed (a restart, an idle-session timeout, an
administrator's pg_terminate_backend) are replaced without failing the calls that come next.

The pool does not ping a connection before handing it out (a round trip per transaction, a
fifth of the create path's): a connection whose socket the server closed is known locally and
replaced at checkout, and a transaction whose BEGIN finds the connection dead, before anything
ran on it, starts again on a fresh one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from functools import partial

import pytest
import structlog
from sqlalchemy import text

from services.store import failures
from services.store.engine import Database, null_pool_engine
from services.store.tx import Sql, Tx
from tests.conftest import backend

pytestmark = pytest.mark.skipif(
    backend() != "postgresql",
    reason="PostgreSQL server connections (runs in .ci/run's PostgreSQL pass); SQLite has none",
)

OTHERS = "datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"


def add_tenant(tenant_id: str) -> Tx[str]:
    yield Sql(
        "INSERT INTO tenants (tenant_id, display_name, created_us) VALUES (:id, 'reconnect test', 1)",
        {"id": tenant_id},
    )
    return tenant_id


async def terminate_other_backends(url: str) -> int:
    """End every server session of the database but this one, and wait until they are gone."""
    admin = null_pool_engine(url)
    try:
        async with admin.connect() as connection:
            ended = await connection.scalar(
                text(f"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE {OTHERS}")
            )
            # Paced by its own round trips: a terminated backend leaves within milliseconds.
            # Each look is a transaction of its own: one transaction sees one snapshot of the
            # activity view, however long it polls.
            for _ in range(10_000):
                await connection.commit()
                if not await connection.scalar(text(f"SELECT count(*) FROM pg_stat_activity WHERE {OTHERS}")):
                    break
            else:
                raise AssertionError("the terminated sessions did not end")
        return int(ended or 0)
    finally:
        await admin.dispose()


async def fill_the_pool(store: Database) -> None:
    """Leave several idle connections in the pool, used by transactions and by sessions."""
    await asyncio.gather(*(store.transact(partial(add_tenant, f"before-{i}")) for i in range(4)))
    async with store.read() as session:
        assert await session.scalar(text("SELECT count(*) FROM tenants")) == 4


async def tenants(store: Database) -> int:
    async with store.read() as session:
        return int(await session.scalar(text("SELECT count(*) FROM tenants")) or 0)


async def test_connections_the_server_closed_are_replaced_at_checkout(store: Database) -> None:
    await fill_the_pool(store)
    assert await terminate_other_backends(store.url) >= 1
    for i in range(6):  # more than the pool held: every dead connection is met
        assert await store.transact(partial(add_tenant, f"after-{i}")) == f"after-{i}"
        assert await tenants(store) == 5 + i
        async with store.write() as session:
            await (await session.connection()).execute(
                text(f"UPDATE tenants SET display_name = 'seen {i}' WHERE tenant_id = 'before-0'")
            )


async def test_a_transaction_whose_begin_finds_its_connection_dead_runs_on_a_fresh_one(store: Database) -> None:
    """The server ends the sessions while this event loop is blocked, so the pooled connections
    do not know yet: the next transaction's BEGIN is the first to find out."""
    await fill_the_pool(store)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as thread:
        # Blocking this loop on purpose: it must not read the sockets' end of file before the BEGIN.
        ended = thread.submit(asyncio.run, terminate_other_backends(store.url)).result(timeout=60)
    assert ended >= 1
    with structlog.testing.capture_logs() as logs:
        assert await store.transact(partial(add_tenant, "after")) == "after"
    # It was BEGIN that found out, not the checkout: the case this test is about.
    assert [entry["event"] for entry in logs].count("postgresql_connection_replaced") == 1
    assert await tenants(store) == 5


async def test_a_session_on_a_connection_found_dead_is_unavailable_and_the_next_one_works(store: Database) -> None:
    """A session cannot start over (its caller's code runs inside it), so its call fails as
    UNAVAILABLE, which clients retry, and the dead connection does not go back to the pool."""
    await fill_the_pool(store)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as thread:
        assert thread.submit(asyncio.run, terminate_other_backends(store.url)).result(timeout=60) >= 1
    with pytest.raises(Exception) as lost:  # noqa: PT011 (any type: what matters is how it translates)
        await tenants(store)
    translated = failures.translate(lost.value)
    assert translated is not None, repr(lost.value)
    assert translated.code == "UNAVAILABLE", repr(lost.value)
    assert await tenants(store) == 4

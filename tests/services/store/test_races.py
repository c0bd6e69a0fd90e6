"""Races between writers that the store must settle correctly, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from services.allocations import commands
from services.allocations.releaser import Releaser
from services.allocations.requests import AllocationRequest
from services.auth import tokens
from services.auth.principal import CONTROL_PLANE, Principal, Role
from services.auth.repository import BOOTSTRAP_LOCK_ID, OPERATOR_TOKEN_FILE, bootstrap_operator, insert_token
from services.errors import ResourceExhausted
from services.nodes import commands as node_commands
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel, GpuSpec, Inventory
from services.notify import Notifier
from services.store.engine import Database
from services.store.tx import Deadlock, Tx, run_in_session
from tests.conftest import backend
from tests.services.store.one_node import store_with_one_node  # noqa: F401  (the `store` fixture)

T = TypeVar("T")


async def _cordon_in_open_transaction(url: str) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[bool]]]:
    """Lock and cordon n1 in a transaction left open; return (commit, is_someone_waiting)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        raw = sqlite3.connect(str(parsed.database), isolation_level=None, check_same_thread=False)
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("UPDATE nodes SET cordoned = 1 WHERE node_id = 'n1'")

        async def commit_sqlite() -> None:
            raw.execute("COMMIT")
            raw.close()

        async def waiting_sqlite() -> bool:
            # The create blocks on SQLite's write lock inside the driver's thread; nothing to poll.
            return True

        return commit_sqlite, waiting_sqlite
    connection = await asyncpg.connect(parsed.set(drivername="postgresql").render_as_string(hide_password=False))
    transaction = connection.transaction()
    await transaction.start()
    await connection.execute("SELECT node_id FROM nodes WHERE node_id = 'n1' FOR UPDATE")
    await connection.execute("UPDATE nodes SET cordoned = true WHERE node_id = 'n1'")

    async def commit_pg() -> None:
        await transaction.commit()
        await connection.close()

    async def waiting_pg() -> bool:
        count = await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return bool(count)

    return commit_pg, waiting_pg


async def test_cordon_committed_during_placement_keeps_the_node_free(store: Database, database_url: str) -> None:
    """A create racing an operator's cordon of the only free node refuses instead of taking it."""
    commit, someone_waiting = await _cordon_in_open_transaction(database_url)
    create = asyncio.create_task(
        commands.create(store, AllocationRequest("acme", GpuModel.H100, 1, "r1", fail_if_unavailable=True))
    )
    # Wait (bounded) until the create is blocked on the cordon's lock; each check is a query.
    deadline = asyncio.get_running_loop().time() + 10
    while not await someone_waiting():
        if asyncio.get_running_loop().time() > deadline:
            break
    await commit()
    with pytest.raises(ResourceExhausted):
        await create
    node = await store.query(nodes_repo.get_view("n1"))
    assert node.row.state == "READY"
    assert node.row.cordoned is True
    assert node.allocation_id is None


async def test_replicas_opening_a_fresh_database_together_both_start(fresh_database_url: str) -> None:
    """Two control planes migrating one empty database at once both come up (migrations serialize)."""
    # Without the migration lock this deadlocks on PostgreSQL: bound it so the test fails instead.
    url = fresh_database_url
    first, second = await asyncio.wait_for(asyncio.gather(Database.open(url), Database.open(url)), 60)
    try:
        async with first.read() as session:
            version = await session.connection()
            rows = (await version.exec_driver_sql("SELECT version_num FROM alembic_version")).all()
        assert len(rows) == 1
    finally:
        await first.close()
        await second.close()


def count_deadlock_victims(store: Database, monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Count the store's transactions PostgreSQL aborts to break a deadlock. Callers such as
    create retry those, so a test cannot see them in the outcome alone."""
    victims = 0
    transact = store.transact

    async def counting(make: Callable[[], Tx[T]]) -> T:
        nonlocal victims
        try:
            return await transact(make)
        except Deadlock:
            victims += 1
            raise

    monkeypatch.setattr(store, "transact", counting)
    return lambda: victims


async def test_concurrent_multi_node_creates_never_deadlock(store: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Creates of 3 nodes from 8 callers on a fleet with room for two: a create whose
    SKIP LOCKED pass came up short used to wait for the other creates' nodes while holding
    some of its own, and two such creates deadlocked (PostgreSQL broke it after a second).
    Every create must end placed or refused for capacity, and no transaction may be a
    deadlock's victim (create retries those, so they are counted where they happen)."""
    victims = count_deadlock_victims(store, monkeypatch)
    for i in range(2, 8):
        gpus = tuple(GpuSpec(f"GPU-n{i}-{g}", g) for g in range(8))
        await node_commands.register(store, CONTROL_PLANE, Inventory(f"n{i}", GpuModel.H100, gpus, "z", "r", "l"))
        await node_commands.complete_burn_in(store, CONTROL_PLANE, f"n{i}", passed=True, detail="")
    tenant = Principal("t", Role.TENANT, tenant_id="acme")
    wake, released = Notifier(), Notifier()
    releaser = Releaser(store, scrub_seconds=0, wake=wake, done=released)
    outcomes: Counter[str] = Counter()
    loop = asyncio.get_running_loop()
    stop = loop.time() + 3

    async def caller(number: int) -> None:
        attempt = 0
        while loop.time() < stop:
            attempt += 1
            request = AllocationRequest(
                "acme", GpuModel.H100, 3, f"caller-{number}-{attempt}", fail_if_unavailable=True
            )
            seen = released.generation
            try:
                view = (await commands.create(store, request)).view
            except ResourceExhausted:
                outcomes["refused"] += 1
                # Capacity comes back with a release: try again after the next one.
                await released.wait(seen, timeout=1.0)
                continue
            outcomes["placed"] += 1
            await commands.cancel(store, tenant, view.row.allocation_id)
            wake.notify()

    releasing = asyncio.create_task(releaser.run())
    try:
        # A deadlock surfaces here as a caller's exception (ABORTED once translated).
        await asyncio.gather(*(caller(n) for n in range(8)))
    finally:
        releasing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await releasing
    assert outcomes["placed"] > 0, outcomes
    assert outcomes["refused"] > 0, outcomes
    assert victims() == 0


@pytest.mark.skipif(
    backend() != "postgresql",
    reason="replicas share a PostgreSQL database (runs in .ci/run's PostgreSQL pass); SQLite writes run one at a time",
)
async def test_a_replica_starting_while_another_mints_the_operator_token_mints_none(
    database_url: str, tmp_path: Path
) -> None:
    """Replica A is minting the first operator token of a fresh database (in its bootstrap
    transaction, not committed yet) when replica B starts: B waits for A, then finds A's token
    and writes no token file of its own."""
    first, second = await Database.open(database_url), await Database.open(database_url)
    monitor = await asyncpg.connect(make_url(database_url).set(drivername="postgresql").render_as_string(False))
    try:
        async with first.write() as session:
            connection = await session.connection()
            await connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({BOOTSTRAP_LOCK_ID})")
            starting = asyncio.create_task(bootstrap_operator(second, tmp_path))
            deadline = asyncio.get_running_loop().time() + 10
            while not await monitor.fetchval(
                "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
                " WHERE d.datname = current_database() AND l.locktype = 'advisory' AND NOT l.granted"
            ):
                # No pause: each check is a round trip to the server, which paces the loop.
                assert asyncio.get_running_loop().time() < deadline, "the second replica never waited"
            await run_in_session(session, insert_token(tokens.issue(), Role.OPERATOR, now_us=1))
        assert await starting is None
        assert not (tmp_path / OPERATOR_TOKEN_FILE).exists()
    finally:
        await monitor.close()
        await first.close()
        await second.close()

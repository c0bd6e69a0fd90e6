"""Races between writers that the store must settle correctly, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from services.allocations import commands
from services.allocations.commands import AllocationRequest
from services.allocations.releaser import Releaser
from services.auth.principal import CONTROL_PLANE, Principal, Role
from services.errors import ResourceExhausted
from services.nodes import commands as node_commands
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel, GpuSpec, Inventory
from services.notify import Notifier
from services.store.engine import Store
from services.tenants import commands as tenant_commands


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(database_url)
    try:
        await tenant_commands.create(opened, "acme", "")
        gpus = tuple(GpuSpec(f"GPU-n1-{i}", i) for i in range(8))
        await node_commands.register(opened, CONTROL_PLANE, Inventory("n1", GpuModel.H100, gpus, "z", "r", "l"))
        await node_commands.complete_burn_in(opened, CONTROL_PLANE, "n1", passed=True, detail="")
        yield opened
    finally:
        await opened.close()


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


async def test_cordon_committed_during_placement_keeps_the_node_free(store: Store, database_url: str) -> None:
    """A create racing an operator's cordon of the only free node refuses instead of taking it."""
    commit, someone_waiting = await _cordon_in_open_transaction(database_url)
    create = asyncio.create_task(commands.create(store, AllocationRequest("acme", GpuModel.H100, 1, "r1")))
    # Wait (bounded) until the create is blocked on the cordon's lock; each check is a query.
    deadline = asyncio.get_running_loop().time() + 10
    while not await someone_waiting():
        if asyncio.get_running_loop().time() > deadline:
            break
    await commit()
    with pytest.raises(ResourceExhausted):
        await create
    async with store.read() as session:
        node = await nodes_repo.get_view(session, "n1")
    assert node.row.state == "READY"
    assert node.row.cordoned is True
    assert node.allocation_id is None


async def test_replicas_opening_a_fresh_database_together_both_start(database_url: str) -> None:
    """Two control planes migrating one empty database at once both come up (migrations serialize)."""
    # Without the migration lock this deadlocks on PostgreSQL: bound it so the test fails instead.
    first, second = await asyncio.wait_for(asyncio.gather(Store.open(database_url), Store.open(database_url)), 60)
    try:
        async with first.read() as session:
            version = await session.connection()
            rows = (await version.exec_driver_sql("SELECT version_num FROM alembic_version")).all()
        assert len(rows) == 1
    finally:
        await first.close()
        await second.close()


async def test_concurrent_multi_node_creates_never_deadlock(store: Store) -> None:
    """Creates of 3 nodes from 8 callers on a fleet with room for two: a create whose
    SKIP LOCKED pass came up short used to wait for the other creates' nodes while holding
    some of its own, and two such creates deadlocked (PostgreSQL broke it after a second with
    an error). Every create must end placed or refused for capacity, nothing else."""
    for i in range(2, 8):
        gpus = tuple(GpuSpec(f"GPU-n{i}-{g}", g) for g in range(8))
        await node_commands.register(store, CONTROL_PLANE, Inventory(f"n{i}", GpuModel.H100, gpus, "z", "r", "l"))
        await node_commands.complete_burn_in(store, CONTROL_PLANE, f"n{i}", passed=True, detail="")
    tenant = Principal("t", Role.TENANT, tenant_id="acme")
    wake = Notifier()
    releaser = Releaser(store, scrub_seconds=0, wake=wake, done=Notifier())
    outcomes: Counter[str] = Counter()
    loop = asyncio.get_running_loop()
    stop = loop.time() + 3

    async def caller(number: int) -> None:
        attempt = 0
        while loop.time() < stop:
            attempt += 1
            request = AllocationRequest("acme", GpuModel.H100, 3, f"caller-{number}-{attempt}")
            try:
                view = await commands.create(store, request)
            except ResourceExhausted:
                outcomes["refused"] += 1
                await asyncio.sleep(0.001)
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
    assert outcomes["placed"] > 0 and outcomes["refused"] > 0, outcomes

"""A transaction stamps its changes after it holds the rows it orders them against.

On PostgreSQL a create's intake, a cancel and a release each wait for other transactions (a duplicate
holding the idempotency key, an operator holding a node's row). A time read before that wait
is older than whatever committed during it: the next tenant's hold began before the previous
one's release, a node's events went out of order. Each test makes one such wait happen, with
a transaction of its own left open, and lets a change commit during it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from services.allocations import commands
from services.allocations.releaser import Releaser
from services.allocations.requests import CREATE_METHOD, AllocationRequest
from services.auth.principal import Principal, Role
from services.clock import now_us
from services.nodes.inventory import GpuModel
from services.notify import Notifier
from services.store.engine import Database
from tests.conftest import backend
from tests.services.store.handover_checks import handovers_before_release, node_events_out_of_order, usage_overlaps
from tests.services.store.one_node import store_with_one_node  # noqa: F401  (the `store` fixture)

pytestmark = pytest.mark.skipif(
    backend() != "postgresql",
    reason="row locks and concurrent transactions (runs in .ci/run's PostgreSQL pass); SQLite writes one at a time",
)

TENANT = Principal("t", Role.TENANT, tenant_id="acme")


@pytest.fixture
def dsn(database_url: str) -> str:
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


async def until_someone_waits_for_a_lock(dsn: str) -> None:
    monitor = await asyncpg.connect(dsn)
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while not await monitor.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ):
            # No pause: each check is a round trip to the server, which paces the loop.
            assert asyncio.get_running_loop().time() < deadline, "nobody waited for the lock"
    finally:
        await monitor.close()


async def cordon_in_open_transaction(dsn: str, node_id: str) -> Callable[[], Awaitable[None]]:
    """An operator's cordon of ``node_id`` in progress: its row locked now; the cordon and its
    event, stamped when it is written, commit when the returned function is called."""
    connection = await asyncpg.connect(dsn)
    await connection.execute("BEGIN")
    state = await connection.fetchval("SELECT state FROM nodes WHERE node_id = $1 FOR UPDATE", node_id)

    async def commit() -> None:
        try:
            await connection.execute(
                "UPDATE nodes SET cordoned = TRUE, status_reason = 'maintenance' WHERE node_id = $1", node_id
            )
            await connection.execute(
                "INSERT INTO node_events (node_id, event, from_state, to_state, reason, actor, at_us)"
                " VALUES ($1, 'CORDON', $2, $2, 'maintenance', 'operator:test', $3)",
                node_id,
                state,
                now_us(),
            )
            await connection.execute("COMMIT")
        finally:
            await connection.close()

    return commit


async def test_a_create_waiting_for_its_key_is_stamped_after_the_release_it_waited_through(
    store: Database, dsn: str
) -> None:
    """A duplicate of a create holds the key (its transaction is still open) while the only node
    is cancelled and released; the duplicate gives up, the create claims the key and the cycle
    places it on the node: it is handed over after the release, not before it."""
    first = (await commands.create(store, AllocationRequest("acme", GpuModel.H100, 1, "first"))).view
    await commands.cancel(store, TENANT, first.row.allocation_id)
    duplicate = await asyncpg.connect(dsn)
    try:
        await duplicate.execute("BEGIN")
        await duplicate.execute(
            "INSERT INTO idempotency_keys (tenant_id, method, request_id, fingerprint, result_id, created_us)"
            " VALUES ('acme', $1, 'second', 'another', 'alloc-x', $2)",
            CREATE_METHOD,
            now_us(),
        )
        second = asyncio.create_task(commands.create(store, AllocationRequest("acme", GpuModel.H100, 1, "second")))
        await until_someone_waits_for_a_lock(dsn)
        releaser = Releaser(store, scrub_seconds=0, wake=Notifier(), done=Notifier())
        await releaser.release_due()
        await duplicate.execute("ROLLBACK")
        placed = (await second).view
    finally:
        await duplicate.close()
    assert placed.node_ids == ("n1",)
    assert await handovers_before_release(store) == []
    assert await node_events_out_of_order(store) == []
    assert await usage_overlaps(store) == []


async def test_a_cancel_waiting_for_a_node_is_stamped_after_what_it_waited_for(store: Database, dsn: str) -> None:
    """A cancel waits for the node an operator is cordoning; the node's RELEASE comes after the
    CORDON that committed first, and so does the end of the tenant's hold."""
    view = (await commands.create(store, AllocationRequest("acme", GpuModel.H100, 1, "r1"))).view
    commit = await cordon_in_open_transaction(dsn, "n1")
    cancel = asyncio.create_task(commands.cancel(store, TENANT, view.row.allocation_id))
    await until_someone_waits_for_a_lock(dsn)
    await commit()
    _, cancelled = await cancel
    assert cancelled.row.cancel_us is not None
    assert await node_events_out_of_order(store) == []


async def test_a_release_waiting_for_a_node_is_stamped_after_what_it_waited_for(store: Database, dsn: str) -> None:
    """The releaser waits for a scrubbing node an operator is cordoning; the node's FINISH_SCRUB
    comes after the CORDON that committed first."""
    view = (await commands.create(store, AllocationRequest("acme", GpuModel.H100, 1, "r1"))).view
    await commands.cancel(store, TENANT, view.row.allocation_id)
    commit = await cordon_in_open_transaction(dsn, "n1")
    releaser = Releaser(store, scrub_seconds=0, wake=Notifier(), done=Notifier())
    releasing = asyncio.create_task(releaser.release_due())
    await until_someone_waits_for_a_lock(dsn)
    await commit()
    await releasing
    assert (await commands.get(store, TENANT, view.row.allocation_id)).row.state == "CANCELLED"
    assert await node_events_out_of_order(store) == []

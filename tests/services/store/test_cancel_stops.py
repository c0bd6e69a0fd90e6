"""A cancel ends the tenant's usage when it is accepted; the release after the scrub adds none.

On SQLite and PostgreSQL: the stops are written with the cancel, the release writes no second
copy, and a CANCELLING allocation without stops (which schema revision 0006 allows) gets them
at its cancel time from the schema upgrade.
"""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from services.allocations import commands
from services.allocations import repository as repo
from services.allocations.releaser import Releaser
from services.allocations.requests import AllocationRequest
from services.auth.principal import Principal, Role
from services.clock import now_us
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel
from services.nodes.transitions import NodeEvent, NodeState
from services.notify import Notifier
from services.store.engine import Database, null_pool_engine
from services.store.migrations import alembic_config
from services.store.tx import Tx
from tests.services.store.one_node import store_with_one_node  # noqa: F401  (the `store` fixture)

TENANT = Principal("t", Role.TENANT, tenant_id="acme")


async def stops(store: Database) -> list[tuple[str, int, int]]:
    async with store.read() as session:
        connection = await session.connection()
        rows = await connection.execute(
            text("SELECT event_id, at_us, recorded_us FROM usage_events WHERE kind = 'stop' ORDER BY event_id")
        )
        return [(str(r[0]), int(r[1]), int(r[2])) for r in rows.all()]


async def release(store: Database) -> None:
    await Releaser(store, scrub_seconds=0, wake=Notifier(), done=Notifier()).release_due()


async def test_the_stops_come_with_the_cancel_and_the_release_adds_none(store: Database) -> None:
    view = (await commands.create(store, AllocationRequest("acme", GpuModel.H100, 1, "r1"))).view
    _, cancelled = await commands.cancel(store, TENANT, view.row.allocation_id)
    accepted = await stops(store)
    assert len(accepted) == 8
    assert {at for _, at, _ in accepted} == {cancelled.row.cancel_us}
    # A repeated cancel replays the operation and writes nothing.
    await commands.cancel(store, TENANT, view.row.allocation_id)
    await release(store)
    released = (await commands.get(store, TENANT, view.row.allocation_id)).row
    assert released.state == "CANCELLED"
    assert released.released_us is not None
    assert released.cancel_us is not None
    assert released.released_us > released.cancel_us
    assert await stops(store) == accepted


def cancel_without_stops(allocation_id: str, *, at_us: int) -> Tx[None]:
    """A cancel accepted as schema revision 0006 allows: the nodes on RELEASE, the allocation
    CANCELLING, no usage event."""
    held = yield from repo.held_nodes([allocation_id], locking=False)
    moves = [nodes_repo.Move(h.node_id, NodeState(h.node_state), NodeEvent.RELEASE) for h in held]
    yield from nodes_repo.apply_many(moves, reason="cancelled", actor="tenant:acme", now_us=at_us)
    yield from repo.mark_cancelling([allocation_id], now_us=at_us)


async def test_the_upgrade_stops_a_cancel_accepted_without_stops_at_its_cancel_time(
    store: Database, database_url: str
) -> None:
    """Revision 0007 writes the stops an allocation CANCELLING at the upgrade lacks, at its
    cancel time; a release then writes none, and a cancel that has its stops gets no second."""
    old = (await commands.create(store, AllocationRequest("acme", GpuModel.H100, 1, "r1"))).view
    cancel_us = now_us()
    await store.transact(lambda: cancel_without_stops(old.row.allocation_id, at_us=cancel_us))
    assert await stops(store) == []
    await store.close()
    # The database taken back to revision 0006 (0007's downgrade keeps the data as it is), which
    # Database.open upgrades again.
    engine = null_pool_engine(database_url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(lambda sync: command.downgrade(alembic_config(sync), "0006"))
    finally:
        await engine.dispose()
    upgraded = await Database.open(database_url)
    try:
        written = await stops(upgraded)
        assert len(written) == 8
        assert {at for _, at, _ in written} == {cancel_us}
        await release(upgraded)
        released = (await commands.get(upgraded, TENANT, old.row.allocation_id)).row
        assert released.state == "CANCELLED"
        assert released.released_us is not None
        assert await stops(upgraded) == written
    finally:
        await upgraded.close()

"""The reconciler's lease: its SQL, and electors that share one database (SQLite or PostgreSQL)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url
from structlog.testing import capture_logs

from services.clock import now_us
from services.control import repository
from services.control.lease import LeaderElector, UnusableLeaseTimes, holder_id
from services.store.engine import Database
from tests.conftest import open_database, until

NAME = "reconciler"
# Ten renewals to a term, so that a renewal held up on a loaded machine (CI runs the suite on
# two cores) does not let the lease lapse and two leaders follow one another.
DURATION_S = 1.0
RENEW_S = 0.1
RETRY_S = 0.02


@dataclass
class Leading:
    """A ``while_leading`` that runs until cancelled and records when it started and ended."""

    started_us: list[int] = field(default_factory=list)
    ended_us: list[int] = field(default_factory=list)

    async def __call__(self) -> None:
        self.started_us.append(now_us())
        try:
            await asyncio.Event().wait()
        finally:
            self.ended_us.append(now_us())

    @property
    def running(self) -> bool:
        return len(self.started_us) > len(self.ended_us)


def elector(store: Database, *, release_on_cancel: bool = True) -> LeaderElector:
    return LeaderElector(
        store,
        NAME,
        holder_id(),
        duration_s=DURATION_S,
        renew_s=RENEW_S,
        retry_s=RETRY_S,
        release_on_cancel=release_on_cancel,
    )


@asynccontextmanager
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail if tasks started inside the block are still there (briefly) after it."""
    before = asyncio.all_tasks()
    yield
    await until(lambda: not asyncio.all_tasks() - before, timeout=5)


def count_transactions(store: Database, monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """How many transactions ``store`` has run from now on: an elector's tries, renewals and
    release are one each, so a test can wait for them rather than for time to pass."""
    runs = 0
    real = store.transact

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal runs
        runs += 1
        return await real(*args, **kwargs)

    monkeypatch.setattr(store, "transact", counted)
    return lambda: runs


async def cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def final_lease(store: Database) -> repository.Lease | None:
    """The lease as stored once every transaction ``store`` had in flight has ended."""
    await store.settled()
    # Through the writer on SQLite: ordered after any renewal it had begun.
    return await store.transact(partial(repository.read, NAME))


# The SQL on its own, at fixed instants.


async def test_acquire_takes_a_free_expired_or_own_lease_only(store: Database) -> None:
    """A held lease refuses another holder until it expires; its holder renews it, keeping acquired_us."""
    assert await store.transact(partial(repository.acquire, NAME, "a", 1_000, 500))
    assert not await store.transact(partial(repository.acquire, NAME, "b", 1_400, 500))
    assert await store.transact(partial(repository.acquire, NAME, "a", 1_400, 500))
    assert await store.query(repository.read(NAME)) == repository.Lease(NAME, "a", 1_000, 1_400, 1_900)
    assert await store.query(repository.holder(NAME, 1_900)) == "a"
    assert await store.query(repository.holder(NAME, 1_901)) is None
    assert await store.transact(partial(repository.acquire, NAME, "b", 1_901, 500))
    assert await store.query(repository.read(NAME)) == repository.Lease(NAME, "b", 1_901, 1_901, 2_401)


async def test_release_gives_up_only_the_holders_own_lease(store: Database) -> None:
    """Release by another holder leaves the lease; by its holder frees it for anyone at once."""
    assert await store.transact(partial(repository.acquire, NAME, "a", 1_000, 500))
    assert not await store.transact(partial(repository.release, NAME, "b"))
    assert await store.query(repository.holder(NAME, 1_100)) == "a"
    assert await store.transact(partial(repository.release, NAME, "a"))
    assert await store.query(repository.holder(NAME, 1_100)) is None
    assert await store.transact(partial(repository.acquire, NAME, "b", 1_100, 500))


async def test_lease_times_that_cannot_keep_one_leader_are_refused(store: Database) -> None:
    """Renewing no sooner than the lease lasts, or never retrying, is refused at construction."""
    with pytest.raises(UnusableLeaseTimes):
        LeaderElector(store, NAME, "a", duration_s=1.0, renew_s=1.0, retry_s=0.1)
    with pytest.raises(UnusableLeaseTimes):
        LeaderElector(store, NAME, "a", duration_s=1.0, renew_s=0.5, retry_s=0.0)


# Electors on two stores of one database: two replicas.


async def test_only_one_of_two_electors_leads(
    store: Database, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas race for the lease: one leads and runs its while_leading, the other waits."""
    async with no_leaked_tasks(), open_database(database_url) as other:
        electors, leading = [elector(store), elector(other)], [Leading(), Leading()]
        runs = [asyncio.create_task(e.run(w)) for e, w in zip(electors, leading, strict=True)]
        await until(lambda: any(e.is_leader for e in electors))
        leader, follower = (store, other) if electors[0].is_leader else (other, store)
        renewals, tries = count_transactions(leader, monkeypatch), count_transactions(follower, monkeypatch)
        # The leader renews for longer than one lease lasts while the other tries again and
        # again: the lease never passes, and the other never starts.
        await until(lambda: renewals() > DURATION_S / RENEW_S and tries() >= 5)
        assert [e.is_leader for e in electors].count(True) == 1
        assert sorted(len(w.started_us) for w in leading) == [0, 1]
        lease = await store.query(repository.read(NAME))
        assert lease is not None
        assert lease.holder == next(e.holder for e in electors if e.is_leader)
        assert lease.renewed_us > lease.acquired_us
        for run in runs:
            await cancel(run)
        assert not any(w.running for w in leading)


async def test_cancelled_leader_releases_and_the_other_takes_over(store: Database, database_url: str) -> None:
    """Cancelling the leader's run stops its while_leading and frees the lease; the other leads."""
    async with no_leaked_tasks(), open_database(database_url) as other:
        first, second = elector(store), elector(other)
        first_leading, second_leading = Leading(), Leading()
        first_run = asyncio.create_task(first.run(first_leading))
        await until(lambda: first.is_leader)
        second_run = asyncio.create_task(second.run(second_leading))
        with capture_logs() as logs:
            await cancel(first_run)
        assert {"event": "lease_released", "lease": NAME, "holder": first.holder, "log_level": "info"} in logs
        assert not first.is_leader
        assert first_leading.ended_us
        assert not first_leading.running
        lease = await final_lease(store)
        assert lease is None or lease.holder == second.holder
        await until(lambda: second_leading.running)
        assert second.is_leader
        await cancel(second_run)
        assert await final_lease(other) is None


async def test_a_dead_leader_is_replaced_only_once_its_lease_expired(store: Database, database_url: str) -> None:
    """A leader that stops renewing without releasing (a dead process) keeps the lease until it expires."""
    async with no_leaked_tasks(), open_database(database_url) as other:
        dead, heir = elector(store, release_on_cancel=False), elector(other)
        heir_leading = Leading()
        dead_run = asyncio.create_task(dead.run(Leading()))
        await until(lambda: dead.is_leader)
        await cancel(dead_run)
        lease = await final_lease(store)
        assert lease is not None
        assert lease.holder == dead.holder
        heir_run = asyncio.create_task(heir.run(heir_leading))
        await until(lambda: heir_leading.running)
        assert heir_leading.started_us[0] > lease.expires_us
        await cancel(heir_run)


@asynccontextmanager
async def lease_row_locked(url: str) -> AsyncIterator[Callable[[], Awaitable[int]]]:
    """Hold the lease row's lock (SQLite: the database's write lock) in an open transaction, so
    that no renewal can commit; yields a read of the lease's expiry as the lock found it."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        raw = sqlite3.connect(str(parsed.database), isolation_level=None, check_same_thread=False)
        raw.execute("BEGIN IMMEDIATE")

        async def expiry_sqlite() -> int:
            return int(raw.execute("SELECT expires_us FROM leases WHERE name = ?", (NAME,)).fetchone()[0])

        try:
            yield expiry_sqlite
        finally:
            raw.execute("COMMIT")
            raw.close()
        return
    connection = await asyncpg.connect(parsed.set(drivername="postgresql").render_as_string(hide_password=False))
    transaction = connection.transaction()
    await transaction.start()
    locked = await connection.fetchval("SELECT expires_us FROM leases WHERE name = $1 FOR UPDATE", NAME)

    async def expiry_pg() -> int:
        return int(locked)

    try:
        yield expiry_pg
    finally:
        await transaction.commit()
        await connection.close()


async def test_a_leader_that_cannot_renew_stops_before_its_lease_expires(store: Database, database_url: str) -> None:
    """Renewals that hang (the database locked) end the leader's while_leading before its lease's
    expiry; once they go through again it leads again."""
    async with no_leaked_tasks():
        leader, leading = elector(store), Leading()
        run = asyncio.create_task(leader.run(leading))
        await until(lambda: leader.is_leader)
        async with lease_row_locked(database_url) as expiry:
            expires_us = await expiry()
            await until(lambda: not leading.running)
            assert leading.ended_us[0] < expires_us
            assert not leader.is_leader
        await until(lambda: leading.running)
        await cancel(run)


async def test_a_leader_whose_lease_was_taken_stops_at_its_next_renewal(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A renewal that finds another holder ends while_leading at once, and the elector goes back to waiting."""
    async with no_leaked_tasks():
        leader, leading = elector(store), Leading()
        run = asyncio.create_task(leader.run(leading))
        await until(lambda: leader.is_leader)
        # Another holder whose clock is an hour ahead, where the lease has expired, takes it for an hour.
        assert await store.transact(
            partial(repository.acquire, NAME, "usurper", now_us() + 3_600_000_000, 3_600_000_000)
        )
        with capture_logs() as logs:
            await until(lambda: not leading.running)
        assert not leader.is_leader
        assert [log["reason"] for log in logs if log["event"] == "lease_lost"] == ["another holder has the lease"]
        # Its tries to take the lease back fail while the usurper holds it.
        tries = count_transactions(store, monkeypatch)
        await until(lambda: tries() >= 3)
        assert len(leading.started_us) == 1
        await cancel(run)
        assert await store.query(repository.holder(NAME, now_us())) == "usurper"


class Finished(Exception):
    """What the test's while_leading raises."""


async def test_while_leading_that_ends_by_itself_gives_the_lease_up(store: Database) -> None:
    """run returns or raises as while_leading does, and leaves the lease free for another replica."""
    async with no_leaked_tasks():

        async def returns() -> None:
            await asyncio.sleep(0)

        async def raises() -> None:
            raise Finished("done")

        await asyncio.wait_for(elector(store).run(returns), 10)
        assert await store.query(repository.read(NAME)) is None
        with pytest.raises(Finished):
            await asyncio.wait_for(elector(store).run(raises), 10)
        assert await store.query(repository.read(NAME)) is None

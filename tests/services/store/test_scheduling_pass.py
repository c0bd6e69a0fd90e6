"""The scheduling pass is the one write path of allocations, on both databases: requests that
arrive together are taken in by one transaction and placed by one plan; a create that asked not
to wait and was not admitted is withdrawn, its key free again; a replica that does not lead
takes its requests in alone and leaves placing them to the leader; and nothing asked is lost
when a replica stops leading."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from functools import partial
from typing import Any

import pytest

from services.allocations import commands
from services.allocations.intake import accept
from services.allocations.repository import AllocationFilter, AllocationView
from services.allocations.requests import AllocationRequest
from services.allocations.scheduler import Scheduler
from services.allocations.writes import PendingCreate
from services.auth.principal import CONTROL_PLANE
from services.errors import InvalidArgument, ResourceExhausted, Unavailable
from services.ids import new_id
from services.nodes.inventory import GpuModel
from services.store.engine import Database
from tests.conftest import until
from tests.services.store.test_placement_decides import LastFit, fleet_store  # noqa: F401  (the `fleet` fixture)


async def _running(scheduler: Scheduler) -> AsyncIterator[Scheduler]:
    task = asyncio.create_task(scheduler.run())
    await until(lambda: scheduler.leading)
    try:
        yield scheduler
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.fixture(name="leader")
async def leader_scheduler(fleet: Database) -> AsyncIterator[Scheduler]:
    """A scheduler running its passes over ``fleet``, as on the fleet's leader, placing last fit."""
    async for scheduler in _running(Scheduler(fleet, LastFit(), interval_s=0.1)):
        yield scheduler


def _create(store: Database, scheduler: Scheduler | None) -> Callable[..., Coroutine[Any, Any, AllocationView]]:
    async def create(count: int, request_id: str, *, fail: bool = False) -> AllocationView:
        request = AllocationRequest("acme", GpuModel.H100, count, request_id, fail_if_unavailable=fail)
        return (await commands.create(store, request, LastFit(), scheduler)).view

    return create


async def test_creates_that_arrive_together_are_placed_by_one_plan(fleet: Database, leader: Scheduler) -> None:
    """Three creates in flight at once: one intake transaction and one cycle, each placed by
    the policy among the nodes the creates before it in the queue left; on SQLite one group
    commit covers both transactions."""
    create = _create(fleet, leader)
    writer = fleet._writer
    before = writer.commits if writer is not None else 0
    placed = await asyncio.gather(create(1, "one"), create(2, "two"), create(1, "three"))
    assert [(v.row.state, v.node_ids) for v in placed] == [
        ("ACTIVE", ("n5",)),
        ("ACTIVE", ("n4", "n3")),
        ("ACTIVE", ("n2",)),
    ]
    if writer is not None:
        assert writer.commits - before == 1, "not one intake and one cycle in one group: the pass did not batch"


async def test_only_a_leading_pass_reads_the_models_with_a_queue(fleet: Database) -> None:
    """A replica that does not lead plans nothing after its intake, so its intake leaves the
    models with a queue unread (on PostgreSQL a round trip saved); the leader's reads them."""
    locking = fleet.dialect == "postgresql"
    waits = PendingCreate(AllocationRequest("acme", GpuModel.H100, 99, "too-big"), "fingerprint", new_id("alloc"))
    alone = await fleet.transact(partial(accept, [waits], [], locking=locking))
    assert alone.queued is None
    leading = await fleet.transact(partial(accept, [], [], locking=locking, queued=True))
    assert leading.queued == (["H100"], 0)


async def test_cancels_that_arrive_together_are_taken_in_together(fleet: Database, leader: Scheduler) -> None:
    create = _create(fleet, leader)
    first, second = await create(1, "first"), await create(5, "second")
    waiting = await create(1, "waiting")
    assert (first.row.state, second.row.state, waiting.row.state) == ("ACTIVE", "ACTIVE", "PENDING")
    answers = await asyncio.gather(
        *(
            commands.cancel(fleet, CONTROL_PLANE, view.row.allocation_id, leader)
            for view in (first, second, waiting, first)
        )
    )
    assert [view.row.state for _, view in answers] == ["CANCELLING", "CANCELLING", "CANCELLED", "CANCELLING"]
    assert [op.done for op, _ in answers] == [False, False, True, False]
    # The same allocation twice in one pass: one cancel, one Operation.
    assert answers[0][0].operation_id == answers[3][0].operation_id
    assert answers[1][1].node_ids == second.node_ids


async def test_a_create_refused_for_capacity_is_withdrawn_and_its_key_free(fleet: Database, leader: Scheduler) -> None:
    create = _create(fleet, leader)
    await create(6, "all of them")
    with pytest.raises(ResourceExhausted) as refused:
        await create(1, "k", fail=True)
    assert refused.value.reason == "INSUFFICIENT_CAPACITY"
    assert refused.value.metadata["reason"] == "WAITING_FOR_CAPACITY"
    assert refused.value.metadata["free"] == "0"
    listed, _ = await commands.list_page(fleet, AllocationFilter(), cursor=None, page_size=10)
    assert [v.row.node_count for v in listed] == [6]
    # Nothing of it was kept: the key names a new request now, not a reused one.
    try:
        again = await create(2, "k")
    except InvalidArgument as error:  # pragma: no cover - the failure this test is about
        pytest.fail(f"the refused create's key was kept: {error}")
    assert again.row.state == "PENDING"


async def test_a_replica_that_does_not_lead_leaves_placing_to_the_leader(fleet: Database, leader: Scheduler) -> None:
    follower = Scheduler(fleet, LastFit())
    assert not follower.leading
    create = _create(fleet, follower)
    placed = await create(2, "on the follower")
    assert (placed.row.state, placed.node_ids) == ("ACTIVE", ("n5", "n4"))
    # Asked not to wait: the leader's cycle withdraws it, and the follower says why.
    with pytest.raises(ResourceExhausted) as refused:
        await create(5, "too many", fail=True)
    assert (refused.value.metadata["reason"], refused.value.metadata["free"]) == ("WAITING_FOR_CAPACITY", "4")
    listed, _ = await commands.list_page(fleet, AllocationFilter(), cursor=None, page_size=10)
    assert len(listed) == 1


async def test_a_create_that_asks_not_to_wait_holds_nothing_back_while_it_is_decided(
    fleet: Database, leader: Scheduler
) -> None:
    """Taken in together: one that asked not to wait and does not fit, at the head of the
    queue, and a smaller one behind it that fits. The first is refused without holding the
    queue, so the second is admitted in the same pass."""
    create = _create(fleet, leader)
    await create(5, "most of them")
    outcomes: tuple[AllocationView | BaseException, ...] = await asyncio.gather(
        create(2, "two", fail=True), create(1, "one"), return_exceptions=True
    )
    refused, admitted = outcomes
    assert isinstance(refused, ResourceExhausted)
    assert refused.metadata["reason"] == "WAITING_FOR_CAPACITY"
    assert isinstance(admitted, AllocationView)
    assert (admitted.row.state, admitted.node_ids) == ("ACTIVE", ("n0",))


async def test_with_no_leader_a_create_that_asks_not_to_wait_is_withdrawn_as_unavailable(fleet: Database) -> None:
    """On a replica that does not lead, with no leader at all: nothing decides the create, so
    one that asked not to wait is withdrawn and UNAVAILABLE (retry), though nodes are free;
    one that may wait stays PENDING for the leader to come."""
    follower = Scheduler(fleet, LastFit(), interval_s=0.1)
    create = _create(fleet, follower)
    with pytest.raises(Unavailable) as unavailable:
        await create(1, "now", fail=True)
    assert unavailable.value.reason == "NO_SCHEDULER"
    waits = await create(1, "later")
    assert waits.row.state == "PENDING"
    listed, _ = await commands.list_page(fleet, AllocationFilter(), cursor=None, page_size=10)
    assert [v.row.allocation_id for v in listed] == [waits.row.allocation_id]


async def test_a_request_waiting_when_the_replica_stops_leading_is_taken_in_anyway(fleet: Database) -> None:
    scheduler = Scheduler(fleet, LastFit(), interval_s=0.1)
    task = asyncio.create_task(scheduler.run())
    await until(lambda: scheduler.leading)
    # The create runs first (tasks run in the order they were readied): it waits for the next
    # pass, which never comes, since the cancel ends ``run`` before it can take the create in.
    create = asyncio.create_task(_create(fleet, scheduler)(1, "in flight"))
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert not scheduler.leading
    assert not create.done()
    # Taken in as a replica that does not lead: recorded, and left for a leader to place.
    view = await create
    assert view.row.state == "PENDING"
    assert (await commands.get(fleet, CONTROL_PLANE, view.row.allocation_id)).row.state == "PENDING"


async def test_a_caller_that_stops_waiting_does_not_stop_the_pass_answering_others(
    fleet: Database, leader: Scheduler
) -> None:
    """A create whose call is cancelled (a deadline, a client gone) after it was queued for the
    pass: the pass still runs, and answers the others it took in."""
    create = _create(fleet, leader)
    gone = asyncio.create_task(create(1, "gone"))
    kept = asyncio.create_task(create(1, "kept"))
    await asyncio.sleep(0)  # one loop turn: both are queued for the next pass, which has not run
    gone.cancel()
    view = await asyncio.wait_for(kept, 10)
    assert view.row.state == "ACTIVE"
    assert gone.cancelled()

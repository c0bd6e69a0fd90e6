"""The idempotent-API suite: retries, reused ids and concurrent duplicates of a create; cancels
that return one operation; and paging through a newest-first listing while allocations are
made, on random interleavings from hypothesis.

Every case makes services of its own (one tenant each, on the reference) and runs in an event
loop of its own. The ``place`` a service is given yields to every other ready request before it
answers, so two requests that arrive together are both in flight while one of them places.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exercises.harness import Implementation, Mistake, guarded, needs, under_test

impl = under_test()
T = TypeVar("T")
CREATE, CANCEL = "AllocationService.create", "AllocationService.cancel"
GET_OPERATION, LIST_PAGE = "AllocationService.get_operation", "AllocationService.list_page"
H100 = "H100"
# How many times a placement lets the other ready requests run before it answers.
_YIELDS = 3
# How many times a case reads an operation, a few milliseconds apart, before it gives up on its finishing.
_POLLS = 400


def fleet() -> Callable[[str, int], Awaitable[list[str]]]:
    """A placement: new node names, once every other request ready to run has run."""
    names = itertools.count(1)

    async def place(gpu_model: str, node_count: int) -> list[str]:
        for _ in range(_YIELDS):
            await asyncio.sleep(0)  # a yield to the other tasks, not a wait
        return [f"{gpu_model.lower()}-{next(names):05d}" for _ in range(node_count)]

    return place


def service(impl: Implementation) -> Any:
    """A new service of the implementation: an empty tenant."""
    return guarded(impl.AllocationService(fleet()))


def run(scenario: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(scenario)


async def listing(svc: Any, page_size: int = 3) -> list[str]:
    """Every allocation id the listing returns, page by page."""
    ids: list[str] = []
    token = ""
    while True:
        page = await svc.list_page(page_size, token)
        ids += [a.allocation_id for a in page.items]
        token = page.next_page_token
        if not token:
            return ids


async def finished(svc: Any, name: str) -> Any:
    """The operation ``name`` once it is done; fails after a couple of seconds. (The suite's own
    wait: it does not import the test helpers, which start a control plane, for a candidate's file.)"""
    for _ in range(_POLLS):
        operation = await svc.get_operation(name)
        if operation.done:
            return operation
        await asyncio.sleep(0.005)
    raise AssertionError(f"{name} is still not done")


async def _repeats_after_an_insert(impl: Implementation) -> bool:
    svc = service(impl)
    for n in range(3):
        await svc.create(f"r{n}", H100, 1)
    first = await svc.list_page(2)
    await svc.create("r3", H100, 1)
    second = await svc.list_page(2, first.next_page_token)
    return bool({a.allocation_id for a in first.items} & {a.allocation_id for a in second.items})


async def _answers_another_request(impl: Implementation) -> bool:
    svc = service(impl)
    await svc.create("r1", H100, 1)
    try:
        await svc.create("r1", H100, 2)
    except impl.RequestIdReused:
        return False
    return True


async def _two_operations(impl: Implementation) -> bool:
    svc = service(impl)
    allocation = await svc.create("r1", H100, 1)
    first, again = await svc.cancel(allocation.allocation_id), await svc.cancel(allocation.allocation_id)
    return bool(first.name != again.name)


async def _places_duplicates(impl: Implementation) -> bool:
    svc = service(impl)
    made = await asyncio.gather(*(svc.create("r1", H100, 1) for _ in range(3)))
    return len({a.allocation_id for a in made}) > 1


async def _shares_ids_across_tenants(impl: Implementation) -> bool:
    first, second = service(impl), service(impl)
    await first.create("r1", H100, 1)
    other = await second.create("r1", H100, 1)
    return await listing(second) != [other.allocation_id]


MISTAKES = [
    Mistake(
        "offset_pagination",
        "an offset shifts when an allocation is made while the client pages: the newest-first listing grows at"
        " the front and the next page repeats one. Put the last item's sort key (create time, id) in the token"
        " and continue strictly after it (keyset pagination)",
        (LIST_PAGE,),
        lambda impl: run(_repeats_after_an_insert(impl)),
    ),
    Mistake(
        "ignores_request_content",
        "a request id names one request: keep a fingerprint of the request with its result, and refuse the same"
        " id with a different request (RequestIdReused) rather than answer with another request's allocation",
        (CREATE,),
        lambda impl: run(_answers_another_request(impl)),
    ),
    Mistake(
        "new_operation_each_cancel",
        "cancelling again returns the same operation: look up the allocation's cancel operation before making"
        " one, so that a client retrying a lost reply polls the one release there is",
        (CANCEL,),
        lambda impl: run(_two_operations(impl)),
    ),
    Mistake(
        "places_concurrent_duplicates",
        "claim the request id before awaiting the placement: a duplicate that arrives meanwhile must wait for"
        " the first call's allocation, not find the id unused and place a second one",
        (CREATE,),
        lambda impl: run(_places_duplicates(impl)),
    ),
    Mistake(
        "request_ids_shared_between_tenants",
        "a request id is scoped to its tenant (one service): another tenant's id says nothing of this one's",
        (CREATE,),
        lambda impl: run(_shares_ids_across_tenants(impl)),
    ),
]


@needs(CREATE, LIST_PAGE)
def test_a_retry_returns_the_first_result() -> None:
    """The same create sent twice with one request id answers the same allocation, made once."""

    async def scenario() -> None:
        svc = service(impl)
        first = await svc.create("r1", H100, 2)
        again = await svc.create("r1", H100, 2)
        assert (again.allocation_id, len(first.node_ids)) == (first.allocation_id, 2)
        assert await listing(svc) == [first.allocation_id]

    run(scenario())


@needs(CREATE, LIST_PAGE)
def test_the_same_id_with_another_request_is_refused() -> None:
    """A request id sent with another request raises RequestIdReused and makes nothing.

    First used for 1 H100 node, then sent for 2 nodes and for an A100; a retry of the first
    request still answers its allocation."""

    async def scenario() -> None:
        svc = service(impl)
        first = await svc.create("r1", H100, 1)
        for model, count in ((H100, 2), ("A100", 1)):
            with pytest.raises(impl.RequestIdReused):
                await svc.create("r1", model, count)
        assert (await svc.create("r1", H100, 1)).allocation_id == first.allocation_id
        assert await listing(svc) == [first.allocation_id]

    run(scenario())


@needs(CREATE, LIST_PAGE)
def test_concurrent_duplicates_create_one() -> None:
    """Copies of a create in flight at once make one allocation, which every copy answers.

    Three copies each of two creates make two allocations."""

    async def scenario() -> None:
        svc = service(impl)
        made = await asyncio.gather(*(svc.create(key, H100, 1) for key in ("r1", "r2") * 3))
        by_key = {key: {a.allocation_id for a in made[i::2]} for i, key in enumerate(("r1", "r2"))}
        assert [len(ids) for ids in by_key.values()] == [1, 1], by_key
        assert sorted(await listing(svc)) == sorted(by_key["r1"] | by_key["r2"])

    run(scenario())


@needs(CREATE, LIST_PAGE)
def test_request_ids_belong_to_one_tenant() -> None:
    """Two tenants (two services) using one request id each make, and list, an allocation of their own."""

    async def scenario() -> None:
        first, second = service(impl), service(impl)
        one, other = await first.create("r1", H100, 1), await second.create("r1", H100, 1)
        assert (await listing(first), await listing(second)) == ([one.allocation_id], [other.allocation_id])

    run(scenario())


@needs(CREATE, CANCEL, GET_OPERATION)
def test_a_cancel_returns_one_operation() -> None:
    """Cancelling again returns the same operation, before and after it is done.

    The operation names the allocation, get_operation finds it, and it finishes."""

    async def scenario() -> None:
        svc = service(impl)
        allocation = await svc.create("r1", H100, 1)
        first = await svc.cancel(allocation.allocation_id)
        again = await svc.cancel(allocation.allocation_id)
        assert (again.name, first.allocation_id) == (first.name, allocation.allocation_id)
        assert (await svc.get_operation(first.name)).allocation_id == allocation.allocation_id
        await finished(svc, first.name)
        late = await svc.cancel(allocation.allocation_id)
        assert (late.name, late.done) == (first.name, True)

    run(scenario())


@needs(CREATE, CANCEL)
def test_concurrent_cancels_share_one_operation() -> None:
    """Three cancels of one allocation in flight at once return one operation."""

    async def scenario() -> None:
        svc = service(impl)
        allocation = await svc.create("r1", H100, 1)
        operations = await asyncio.gather(*(svc.cancel(allocation.allocation_id) for _ in range(3)))
        assert len({o.name for o in operations}) == 1

    run(scenario())


@needs(CREATE, LIST_PAGE)
def test_a_listing_is_newest_first_in_pages() -> None:
    """Five allocations listed two at a time: pages of 2, 2 and 1, newest first, the last with no token."""

    async def scenario() -> None:
        svc = service(impl)
        made = [(await svc.create(f"r{n}", H100, 1)).allocation_id for n in range(5)]
        pages, token = [], ""
        for _ in range(3):
            page = await svc.list_page(2, token)
            pages.append([a.allocation_id for a in page.items])
            token = page.next_page_token
        assert pages == [made[4:2:-1], made[2:0:-1], made[:1]]
        assert token == ""

    run(scenario())


@needs(CREATE, LIST_PAGE)
def test_an_allocation_made_between_pages_moves_no_cursor() -> None:
    """An allocation made between two pages does not make the next page repeat one.

    Three allocations listed two at a time, a fourth made after the first page: the second page
    is the oldest one."""

    async def scenario() -> None:
        svc = service(impl)
        made = [(await svc.create(f"r{n}", H100, 1)).allocation_id for n in range(3)]
        first = await svc.list_page(2)
        await svc.create("r3", H100, 1)
        second = await svc.list_page(2, first.next_page_token)
        assert [a.allocation_id for a in first.items] == [made[2], made[1]]
        assert [a.allocation_id for a in second.items] == [made[0]]

    run(scenario())


@needs(CREATE, LIST_PAGE)
@settings(max_examples=20)
@given(st.integers(0, 8), st.integers(1, 4), st.lists(st.integers(0, 2), max_size=8))
def test_paging_under_inserts_never_skips_or_repeats(existing: int, page_size: int, inserts: list[int]) -> None:
    """Paging while allocations are made never skips or repeats one that existed when paging began.

    Every allocation there was before the first page is returned exactly once, and none twice."""

    async def scenario() -> None:
        svc = service(impl)
        before = [(await svc.create(f"old-{n}", H100, 1)).allocation_id for n in range(existing)]
        seen: list[str] = []
        token, made = "", itertools.count()
        for page_number in itertools.count():
            page = await svc.list_page(page_size, token)
            assert len(page.items) <= page_size
            seen += [a.allocation_id for a in page.items]
            token = page.next_page_token
            if not token:
                break
            for _ in range(inserts[page_number] if page_number < len(inserts) else 0):
                await svc.create(f"new-{next(made)}", H100, 1)
        repeated = sorted({i for i in seen if seen.count(i) > 1})
        assert repeated == [], f"returned twice: {repeated}"
        assert [i for i in before if i not in seen] == [], "skipped an allocation that existed from the start"

    run(scenario())

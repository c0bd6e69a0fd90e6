"""The queue's admission rule (services/allocations/queue.py): whole gangs or nothing, in
order, a blocked head holding the free nodes, and a reason for everything left waiting."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import scheduling
from services.allocations.placement import Candidate, Pool
from services.allocations.queue import ReasonKind, plan
from services.allocations.repository import Allocation

FIRST_FIT = scheduling.POLICIES["first-fit"]


def pool(free: int) -> Pool:
    return Pool(Candidate("zone-a", f"rack-{i // 4}", f"leaf-{i // 8}", f"node-{i:03d}") for i in range(free))


def waiting(name: str, nodes: int, *, priority: int = 0, created_us: int = 0, same_block: bool = False) -> Allocation:
    return Allocation(name, "acme", "H100", nodes, "PENDING", created_us, priority=priority, same_block=same_block)


def test_a_gang_that_fits_is_admitted_whole_and_its_nodes_leave_the_pool() -> None:
    free = pool(10)
    made = plan([waiting("a", 4), waiting("b", 6)], free, policy=FIRST_FIT, keep=0, fleet_nodes=10, fleet_block=8)
    assert [(row.allocation_id, len(nodes)) for row, nodes in made.admitted] == [("a", 4), ("b", 6)]
    assert not made.waiting
    assert free.free == 0


def test_two_gangs_larger_than_half_the_pool_one_runs_the_other_holds_nothing() -> None:
    free = pool(100)
    made = plan([waiting("a", 64), waiting("b", 64)], free, policy=FIRST_FIT, keep=0, fleet_nodes=100, fleet_block=8)
    assert [row.allocation_id for row, _ in made.admitted] == ["a"]
    [reason] = made.waiting["b"]
    assert reason.kind is ReasonKind.WAITING_FOR_CAPACITY
    assert reason.figures == {"free": 36, "spares": 0, "needed": 64}
    assert "36 free H100 node(s)" in reason.message
    assert "short by 28" in reason.message
    assert free.free == 36


def test_a_blocked_head_keeps_smaller_work_behind_it_off_the_free_nodes() -> None:
    made = plan(
        [waiting("big", 8), waiting("small", 1), waiting("also-small", 2)],
        pool(5),
        policy=FIRST_FIT,
        keep=0,
        fleet_nodes=10,
        fleet_block=8,
    )
    assert made.admitted == []
    assert [r.kind for r in made.waiting["big"]] == [ReasonKind.WAITING_FOR_CAPACITY]
    [behind] = made.waiting["small"]
    assert behind.kind is ReasonKind.BEHIND_GANGS
    assert behind.figures == {"ahead": 1, "position": 2, "head_needs": 8, "free": 5}
    assert made.waiting["also-small"][0].figures["ahead"] == 2


def test_short_of_capacity_as_well_as_behind_puts_capacity_first() -> None:
    made = plan(
        [waiting("big", 8), waiting("bigger", 9)], pool(5), policy=FIRST_FIT, keep=0, fleet_nodes=10, fleet_block=8
    )
    assert [r.kind for r in made.waiting["bigger"]] == [ReasonKind.WAITING_FOR_CAPACITY, ReasonKind.BEHIND_GANGS]


def test_a_gang_larger_than_the_fleet_holds_nothing_back() -> None:
    made = plan(
        [waiting("huge", 11), waiting("small", 1)], pool(5), policy=FIRST_FIT, keep=0, fleet_nodes=10, fleet_block=8
    )
    assert [row.allocation_id for row, _ in made.admitted] == ["small"]
    [reason] = made.waiting["huge"]
    assert reason.kind is ReasonKind.NO_ACCEPTABLE_MODEL
    assert reason.figures == {"fleet": 10, "spares": 0, "needed": 11}


def test_spares_are_left_free_and_named_in_the_reason() -> None:
    made = plan([waiting("a", 3), waiting("b", 2)], pool(6), policy=FIRST_FIT, keep=2, fleet_nodes=6, fleet_block=8)
    assert [row.allocation_id for row, _ in made.admitted] == ["a"]
    [reason] = made.waiting["b"]
    assert reason.figures == {"free": 3, "spares": 2, "needed": 2}
    assert "2 of them held back as spares" in reason.message


def test_a_same_block_gang_larger_than_any_leaf_switch_holds_nothing_back() -> None:
    made = plan(
        [waiting("gang", 9, same_block=True), waiting("small", 1)],
        pool(16),
        policy=FIRST_FIT,
        keep=0,
        fleet_nodes=16,
        fleet_block=8,
    )
    assert [row.allocation_id for row, _ in made.admitted] == ["small"]
    [reason] = made.waiting["gang"]
    assert reason.kind is ReasonKind.TOPOLOGY
    assert "no leaf switch in the fleet has 9" in reason.message


def test_a_same_block_gang_goes_to_a_leaf_switch_that_holds_it() -> None:
    free = pool(16)
    free.take([f"node-{i:03d}" for i in range(4)])  # four free under the first leaf switch
    made = plan([waiting("gang", 5, same_block=True)], free, policy=FIRST_FIT, keep=0, fleet_nodes=16, fleet_block=8)
    [(_, nodes)] = made.admitted
    assert nodes == [f"node-{i:03d}" for i in range(8, 13)]


def test_a_same_block_head_short_of_a_block_holds_the_queue_and_says_topology() -> None:
    free = pool(16)
    free.take(["node-000", "node-008"])  # seven free under each leaf switch
    made = plan(
        [waiting("gang", 8, same_block=True), waiting("small", 1)],
        free,
        policy=FIRST_FIT,
        keep=0,
        fleet_nodes=16,
        fleet_block=8,
    )
    assert made.admitted == []
    [reason] = made.waiting["gang"]
    assert reason.kind is ReasonKind.TOPOLOGY
    assert reason.figures == {"largest_block": 7, "needed": 8, "free": 14}
    assert [r.kind for r in made.waiting["small"]] == [ReasonKind.BEHIND_GANGS]


@st.composite
def queues(draw: st.DrawFn) -> tuple[list[Allocation], int, int]:
    fleet = draw(st.integers(1, 40))
    free = draw(st.integers(0, fleet))
    sizes = draw(st.lists(st.integers(1, 45), max_size=12))
    return [waiting(f"q{i:02d}", n) for i, n in enumerate(sizes)], free, fleet


@settings(max_examples=200, deadline=None)
@given(queues())
def test_every_allocation_is_admitted_whole_or_waits_with_a_reason_in_order(
    case: tuple[list[Allocation], int, int],
) -> None:
    """Admissions are whole and disjoint; nothing is admitted after a blocked gang that could
    run; everything not admitted has at least one reason."""
    queued, free, fleet = case
    made = plan(queued, pool(free), policy=FIRST_FIT, keep=0, fleet_nodes=fleet, fleet_block=8)
    placed = [node for _, nodes in made.admitted for node in nodes]
    assert len(placed) == len(set(placed)) <= free
    assert all(len(nodes) == row.node_count for row, nodes in made.admitted)
    admitted = {row.allocation_id for row, _ in made.admitted}
    assert admitted.isdisjoint(made.waiting)
    assert admitted | set(made.waiting) == {q.allocation_id for q in queued}
    assert all(made.waiting[name] for name in made.waiting)
    blocked = False
    for row in queued:
        if row.node_count > fleet:
            continue
        if blocked:
            assert row.allocation_id not in admitted
        elif row.allocation_id not in admitted:
            blocked = True


def test_a_gang_the_spares_leave_no_room_for_holds_nothing_back() -> None:
    """Eight nodes, two of them spares: a gang of eight can never be admitted, so it is passed
    over rather than holding the queue behind it for ever."""
    made = plan(
        [waiting("all", 8), waiting("small", 1)], pool(8), policy=FIRST_FIT, keep=2, fleet_nodes=8, fleet_block=8
    )
    assert [row.allocation_id for row, _ in made.admitted] == ["small"]
    [reason] = made.waiting["all"]
    assert reason.kind is ReasonKind.NO_ACCEPTABLE_MODEL
    assert reason.figures == {"fleet": 8, "spares": 2, "needed": 8}

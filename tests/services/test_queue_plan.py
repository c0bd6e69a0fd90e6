"""The queue's admission rule (services/allocations/queue.py): whole gangs or nothing, in
order, a blocked head holding the free nodes, and a reason for everything left waiting."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import scheduling
from services.allocations.placement import Candidate, Pool
from services.allocations.queue import ReasonKind, plan
from services.allocations.quotas import NODE_MILLI, Ledger, Quota
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


def ledger(*quotas: tuple[str, int, int, str], used: dict[str, int] | None = None) -> Ledger:
    """Quotas as (tenant, nodes, borrow limit, cohort), and the whole nodes each tenant holds."""
    held = {tenant: nodes * NODE_MILLI for tenant, nodes in (used or {}).items()}
    return Ledger((Quota(t, "H100", n, b, c, "operator", 0) for t, n, b, c in quotas), held)


def owned(name: str, tenant: str, nodes: int, *, priority: int = 0, admitted_us: int = 0) -> Allocation:
    return Allocation(name, tenant, "H100", nodes, "ACTIVE", 0, priority=priority, admitted_us=admitted_us)


def test_over_quota_waits_without_holding_up_other_tenants() -> None:
    quotas = ledger(("acme", 2, 0, ""), used={"acme": 2})
    queued = [
        Allocation("a", "acme", "H100", 1, "PENDING", 0),
        Allocation("b", "bolt", "H100", 3, "PENDING", 1),
    ]
    made = plan(queued, pool(4), policy=FIRST_FIT, keep=0, fleet_nodes=8, fleet_block=8, ledger=quotas)
    assert [row.allocation_id for row, _ in made.admitted] == ["b"]
    [reason] = made.waiting["a"]
    assert reason.kind is ReasonKind.QUOTA_EXCEEDED
    assert reason.figures == {"used": 2, "limit": 2, "nominal": 2, "needed": 1}


def test_a_tenant_borrows_what_its_cohort_leaves_unused_up_to_its_limit() -> None:
    quotas = ledger(("acme", 2, 3, "lab"), ("bolt", 4, 0, "lab"), used={"bolt": 1})
    queued = [Allocation("a", "acme", "H100", 5, "PENDING", 0), Allocation("b", "acme", "H100", 1, "PENDING", 1)]
    made = plan(queued, pool(8), policy=FIRST_FIT, keep=0, fleet_nodes=8, fleet_block=8, ledger=quotas)
    assert [row.allocation_id for row, _ in made.admitted] == ["a"]  # 2 own + 3 of bolt's unused 3
    [reason] = made.waiting["b"]
    assert reason.kind is ReasonKind.QUOTA_EXCEEDED
    assert reason.figures["limit"] == 5


def test_reclaim_preempts_only_borrowers_lowest_priority_then_newest() -> None:
    """Eight nodes, all held: bolt borrows two beyond its four, carol holds its own two. acme,
    within its own four, reclaims two: bolt's newest low-priority allocation goes, and no one
    else's."""
    quotas = ledger(("acme", 4, 0, "lab"), ("bolt", 4, 4, "lab"), ("carol", 2, 0, "lab"), used={"bolt": 6, "carol": 2})
    running = [
        owned("bolt-old", "bolt", 2, admitted_us=1),
        owned("bolt-new", "bolt", 2, admitted_us=3),
        owned("bolt-vip", "bolt", 2, priority=9, admitted_us=4),
        owned("carol-1", "carol", 2, admitted_us=5),
    ]
    free = pool(8)
    free.take([f"node-{i:03d}" for i in range(8)])
    queued = [Allocation("a", "acme", "H100", 2, "PENDING", 0)]
    made = plan(queued, free, policy=FIRST_FIT, keep=0, fleet_nodes=8, fleet_block=8, ledger=quotas, running=running)
    assert [(row.allocation_id, "acme reclaims" in why) for row, why in made.preempted] == [("bolt-new", True)]
    [reason] = made.waiting["a"]
    assert reason.kind is ReasonKind.WAITING_FOR_PREEMPTION
    assert reason.figures == {"reclaiming": 2, "free": 0, "needed": 2}
    # The next cycle, the victim still scrubbing: nothing more is preempted.
    quotas = ledger(("acme", 4, 0, "lab"), ("bolt", 4, 4, "lab"), ("carol", 2, 0, "lab"), used={"bolt": 4, "carol": 2})
    again = plan(
        queued,
        free,
        policy=FIRST_FIT,
        keep=0,
        fleet_nodes=8,
        fleet_block=8,
        ledger=quotas,
        running=[r for r in running if r.allocation_id != "bolt-new"],
        reclaiming=2,
    )
    assert again.preempted == []
    assert again.waiting["a"][0].kind is ReasonKind.WAITING_FOR_PREEMPTION


def test_no_one_is_preempted_when_the_borrowers_cannot_free_enough() -> None:
    quotas = ledger(("acme", 6, 0, "lab"), ("bolt", 2, 4, "lab"), used={"bolt": 3, "acme": 3})
    running = [owned("bolt-1", "bolt", 3), owned("acme-1", "acme", 3)]
    free = pool(6)
    free.take([f"node-{i:03d}" for i in range(6)])
    queued = [Allocation("a", "acme", "H100", 3, "PENDING", 0)]
    # Three needed, bolt borrows one (3 held, 2 its own): taking its allocation frees three.
    made = plan(queued, free, policy=FIRST_FIT, keep=0, fleet_nodes=6, fleet_block=8, ledger=quotas, running=running)
    assert [row.allocation_id for row, _ in made.preempted] == ["bolt-1"]
    # A tenant outside the cohort is never preempted, however much it holds.
    quotas = ledger(("acme", 6, 0, "lab"), ("bolt", 2, 4, "other"), used={"bolt": 3, "acme": 3})
    made = plan(queued, free, policy=FIRST_FIT, keep=0, fleet_nodes=6, fleet_block=8, ledger=quotas, running=running)
    assert made.preempted == []
    assert made.waiting["a"][0].kind is ReasonKind.WAITING_FOR_CAPACITY

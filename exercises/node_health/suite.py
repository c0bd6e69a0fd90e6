"""The node-health suite: the lifecycle's rules as cases and as properties over random walks of
events, and the strike counting of ``decide`` on small policies written for each trap."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exercises.harness import Implementation, Mistake, needs, under_test
from services.health.policy import Action, Observation, Rule
from services.nodes.transitions import NodeEvent, NodeState

impl = under_test()
S, E = NodeState, NodeEvent
HOUR = 3600.0
FREE = (S.REGISTERED, S.BURN_IN, S.READY)
HELD = (S.ALLOCATED, S.DRAINING, S.SCRUBBING)


def moves(impl: Implementation, state: NodeState, event: NodeEvent) -> Any:
    """The state ``event`` moves ``state`` to, or None when the implementation refuses it."""
    try:
        return impl.next_state("n1", state, event)
    except impl.IllegalTransition:
        return None


def rule(signal: str, action: Action, strikes: int, window_s: float = HOUR, spacing_s: float = 0.0) -> Rule:
    return Rule(signal, action, strikes, window_s, f"{strikes} {signal} in {window_s:g} s", spacing_s)


def seen(signal: str, *times: float, gpu: int | None = 0) -> list[Observation]:
    return [Observation(signal, at, gpu) for at in times]


def action_of(impl: Implementation, observations: list[Observation], now_s: float, policy: list[Rule]) -> Action:
    decision = impl.decide(observations, now_s, policy)
    return Action.NONE if decision is None else Action(decision.action)


XID_79 = [rule("xid:79", Action.DRAIN_NOW, 3)]
SPACED = [rule("xid:31", Action.DRAIN_AFTER_JOB, 3, 24 * HOUR, spacing_s=HOUR)]

MISTAKES = [
    Mistake(
        "drain_evicts",
        "a held node stays with its tenant until released: DRAIN of an ALLOCATED node is DRAINING, not out of service",
        ("next_state",),
        lambda impl: moves(impl, S.ALLOCATED, E.DRAIN) != S.DRAINING,
    ),
    Mistake(
        "ready_dirty",
        "a released node is scrubbed before anyone else gets it: RELEASE goes to SCRUBBING, never READY",
        ("next_state",),
        lambda impl: (
            moves(impl, S.ALLOCATED, E.RELEASE) != S.SCRUBBING or moves(impl, S.DRAINING, E.RELEASE) != S.SCRUBBING
        ),
    ),
    Mistake(
        "skips_burn_in",
        "back to service always goes through burn-in: RETURN_TO_SERVICE is BURN_IN, not READY",
        ("next_state",),
        lambda impl: moves(impl, S.REPAIR, E.RETURN_TO_SERVICE) != S.BURN_IN,
    ),
    Mistake(
        "accepts_any_event",
        "an event the table does not list for the state raises IllegalTransition and changes nothing",
        ("next_state",),
        lambda impl: (
            moves(impl, S.RETIRED, E.START_BURN_IN) is not None or moves(impl, S.QUARANTINED, E.ALLOCATE) is not None
        ),
    ),
    Mistake(
        "ignores_spacing",
        "a strike closer than spacing_s to the last one counted is the same fault retried: count it once",
        ("decide",),
        lambda impl: action_of(impl, seen("xid:31", 0, 60, 120), 200, SPACED) != Action.NONE,
    ),
    Mistake(
        "counts_outside_window",
        "only strikes within window_s before now count: drop the older ones (and those after now)",
        ("decide",),
        lambda impl: action_of(impl, seen("xid:79", 0, 10, 2 * HOUR + 20), 2 * HOUR + 30, XID_79) != Action.NONE,
    ),
    Mistake(
        "pools_gpus",
        "strikes are counted per GPU (and for the node as a whole): two on GPU 0 and one on GPU 1 are not three",
        ("decide",),
        lambda impl: action_of(impl, [*seen("xid:79", 1, 2), *seen("xid:79", 3, gpu=1)], 10, XID_79) != Action.NONE,
    ),
    Mistake(
        "first_rule_wins",
        "among the rules that fire, the most severe action wins, wherever it stands in the policy",
        ("decide",),
        lambda impl: (
            action_of(
                impl,
                seen("ecc", 1, 2),
                10,
                [rule("ecc", Action.NOTIFY_TENANT, 1), rule("ecc", Action.RMA, 2), rule("ecc", Action.DRAIN_NOW, 1)],
            )
            != Action.RMA
        ),
    ),
]


@needs("next_state")
@pytest.mark.parametrize("state", FREE)
def test_a_drained_free_node_leaves_service_at_once(state: NodeState) -> None:
    """DRAIN of a registered, burning-in or ready node quarantines it."""
    assert impl.next_state("n1", state, E.DRAIN) == S.QUARANTINED


@needs("next_state")
def test_a_drained_held_node_stays_with_its_tenant() -> None:
    """DRAIN of an allocated node is DRAINING; its release scrubs it, and the scrub quarantines it."""
    draining = impl.next_state("n1", S.ALLOCATED, E.DRAIN)
    assert draining == S.DRAINING
    scrubbing = impl.next_state("n1", draining, E.RELEASE)
    assert scrubbing == S.SCRUBBING
    assert impl.next_state("n1", scrubbing, E.FINISH_SCRUB_DRAINED) == S.QUARANTINED


@needs("next_state")
def test_the_life_of_a_node() -> None:
    """Registered, burnt in, allocated, released, scrubbed, ready again; then drained and repaired."""
    state = S.REGISTERED
    path = [
        (E.START_BURN_IN, S.BURN_IN),
        (E.PASS_BURN_IN, S.READY),
        (E.ALLOCATE, S.ALLOCATED),
        (E.RELEASE, S.SCRUBBING),
        (E.FINISH_SCRUB, S.READY),
        (E.DRAIN, S.QUARANTINED),
        (E.START_REPAIR, S.REPAIR),
        (E.RETURN_TO_SERVICE, S.BURN_IN),
        (E.FAIL_BURN_IN, S.QUARANTINED),
        (E.RETIRE, S.RETIRED),
    ]
    for event, expected in path:
        state = impl.next_state("n1", state, event)
        assert state == expected, f"{event} led to {state}, not {expected}"


@needs("next_state")
def test_a_retired_node_never_moves() -> None:
    """Every event on a RETIRED node raises IllegalTransition."""
    moved = {event: target for event in E if (target := moves(impl, S.RETIRED, event)) is not None}
    assert moved == {}


@needs("next_state")
def test_an_event_the_state_does_not_allow_is_refused() -> None:
    """ALLOCATE of a quarantined node raises IllegalTransition."""
    with pytest.raises(impl.IllegalTransition):
        impl.next_state("n1", S.QUARANTINED, E.ALLOCATE)


@needs("next_state")
@given(st.randoms(use_true_random=False), st.integers(1, 60))
def test_no_walk_hands_a_node_out_dirty(rng: random.Random, steps: int) -> None:
    """On any walk of allowed events, a held node becomes ready only through SCRUBBING, and back
    to service (READY from out of service) only through BURN_IN."""
    state = S.REGISTERED
    for _ in range(steps):
        allowed = [(event, target) for event in E if (target := moves(impl, state, event)) is not None]
        if not allowed:
            return
        event, target = rng.choice(allowed)
        if target == S.READY:
            assert state in (S.SCRUBBING, S.BURN_IN), f"{event} made a {state} node READY"
        if state in HELD and target not in HELD:
            assert state == S.SCRUBBING, f"{event} took a {state} node from its tenant unscrubbed"
        state = target


@needs("decide")
def test_strikes_fire_a_rule_at_its_count() -> None:
    """Two XID 79s in an hour call for nothing under a rule of three; a third calls for its action."""
    assert impl.decide(seen("xid:79", 10, 20), 100, XID_79) is None
    decision = impl.decide(seen("xid:79", 10, 20, 30), 100, XID_79)
    assert decision is not None
    assert (Action(decision.action), decision.strikes, decision.gpu) == (Action.DRAIN_NOW, 3, 0)


@needs("decide")
def test_only_strikes_in_the_window_count() -> None:
    """Strikes older than the window, or later than now, do not count; one at the window's start does."""
    assert impl.decide(seen("xid:79", 0, 10, 2 * HOUR + 20), 2 * HOUR + 30, XID_79) is None
    assert impl.decide(seen("xid:79", 100, 110, 120, 5000), 120, XID_79) is not None
    assert impl.decide(seen("xid:79", 100, 110, 5000), 120, XID_79) is None
    assert impl.decide(seen("xid:79", 0, 10, 20), HOUR, XID_79) is not None


@needs("decide")
def test_a_retry_storm_within_the_spacing_is_one_strike() -> None:
    """Three page faults a minute apart are one strike under a rule spaced an hour; three an hour apart fire."""
    assert impl.decide(seen("xid:31", 0, 60, 120), 200, SPACED) is None
    assert impl.decide(seen("xid:31", 0, 60, HOUR, 2 * HOUR), 2 * HOUR, SPACED) is not None


@needs("decide")
def test_strikes_are_counted_per_gpu() -> None:
    """Two strikes on GPU 0 and one on GPU 1 do not fire a rule of three."""
    assert impl.decide([*seen("xid:79", 1, 2), *seen("xid:79", 3, gpu=1)], 10, XID_79) is None


@needs("decide")
def test_the_most_severe_action_wins() -> None:
    """Rules for NOTIFY_TENANT, RMA and DRAIN_NOW all fire: the decision is RMA."""
    policy = [rule("ecc", Action.NOTIFY_TENANT, 1), rule("ecc", Action.RMA, 2), rule("ecc", Action.DRAIN_NOW, 1)]
    assert action_of(impl, seen("ecc", 1, 2), 10, policy) == Action.RMA


observations = st.lists(
    st.builds(
        Observation,
        st.sampled_from(["xid:79", "xid:31", "ecc"]),
        st.integers(0, 3 * 3600),
        st.sampled_from([None, 0, 1]),
    ),
    max_size=12,
)
POLICY = [
    *XID_79,
    *SPACED,
    rule("ecc", Action.NOTIFY_TENANT, 1),
    rule("ecc", Action.REPAIR, 4, 2 * HOUR, spacing_s=600),
]


@needs("decide")
@given(observations, st.randoms(use_true_random=False))
def test_the_order_of_reports_does_not_matter(seen_: list[Observation], rng: random.Random) -> None:
    """decide() gives the same action and strikes whatever order the observations come in."""
    shuffled = list(seen_)
    rng.shuffle(shuffled)
    first, second = impl.decide(seen_, 3 * HOUR, POLICY), impl.decide(shuffled, 3 * HOUR, POLICY)
    assert (first is None) == (second is None)
    if first is not None and second is not None:
        assert (first.action, first.strikes) == (second.action, second.strikes)


@needs("decide")
@given(observations, observations)
def test_another_report_never_lowers_the_action(seen_: list[Observation], more: list[Observation]) -> None:
    """More bad reports can only keep or raise the action: a good day does not reset strikes."""
    assert action_of(impl, seen_ + more, 3 * HOUR, POLICY) >= action_of(impl, seen_, 3 * HOUR, POLICY)

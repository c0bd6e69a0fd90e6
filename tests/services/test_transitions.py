"""The node lifecycle table: every (event, state) pair, terminal and reachable states."""

from __future__ import annotations

import itertools
from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.errors import Code, FailedPrecondition
from services.nodes.transitions import (
    HELD_STATES,
    TRANSITIONS,
    IllegalTransition,
    NodeEvent,
    NodeState,
    next_state,
)

S = NodeState
E = NodeEvent
ALL_PAIRS = list(itertools.product(NodeEvent, NodeState))


@pytest.mark.parametrize(("event", "state"), ALL_PAIRS, ids=[f"{e}-{s}" for e, s in ALL_PAIRS])
def test_every_pair_is_allowed_by_the_table_or_illegal(event: NodeEvent, state: NodeState) -> None:
    """A listed (event, state) pair moves to the table's target; any other raises IllegalTransition."""
    if (event, state) in TRANSITIONS:
        assert next_state("node-1", state, event) is TRANSITIONS[(event, state)]
        return
    with pytest.raises(IllegalTransition) as caught:
        next_state("node-1", state, event)
    error = caught.value
    assert isinstance(error, FailedPrecondition)
    assert error.code is Code.FAILED_PRECONDITION
    assert error.reason == "ILLEGAL_NODE_TRANSITION"
    assert error.metadata == {"node_id": "node-1", "field": "node_id", "state": state, "event": event}
    assert str(state) in error.message
    assert str(event) in error.message


def test_table_mentions_only_known_events_and_states() -> None:
    """Every key and target of the table is a member of the NodeEvent / NodeState enums."""
    for (event, state), target in TRANSITIONS.items():
        assert isinstance(event, NodeEvent)
        assert isinstance(state, NodeState)
        assert isinstance(target, NodeState)


def test_retired_is_terminal() -> None:
    """No event leads out of RETIRED, and RETIRED is reachable only by RETIRE."""
    for event in NodeEvent:
        with pytest.raises(IllegalTransition):
            next_state("node-1", S.RETIRED, event)
    assert {e for (e, _), t in TRANSITIONS.items() if t is S.RETIRED} == {E.RETIRE}


def test_every_state_is_reachable_from_registered() -> None:
    """A breadth-first walk of the table from REGISTERED visits every state."""
    seen = {S.REGISTERED}
    queue = deque([S.REGISTERED])
    while queue:
        state = queue.popleft()
        for event in NodeEvent:
            try:
                target = next_state("node-1", state, event)
            except IllegalTransition:
                continue
            if target not in seen:
                seen.add(target)
                queue.append(target)
    assert seen == set(NodeState)


def test_every_non_terminal_state_can_reach_retired() -> None:
    """From every state except RETIRED some path of events ends in RETIRED (no dead ends)."""
    for start in NodeState:
        seen = {start}
        queue = deque([start])
        while queue:
            state = queue.popleft()
            for (_event, source), target in TRANSITIONS.items():
                if source is state and target not in seen:
                    seen.add(target)
                    queue.append(target)
        assert S.RETIRED in seen, start


def test_held_node_reaches_ready_only_through_a_scrub() -> None:
    """From ALLOCATED and DRAINING every move goes to SCRUBBING or stays held; READY needs FINISH_SCRUB."""
    for (event, source), target in TRANSITIONS.items():
        if source in {S.ALLOCATED, S.DRAINING}:
            assert target in HELD_STATES, (event, source, target)
    sources_of_ready = {(e, s) for (e, s), t in TRANSITIONS.items() if t is S.READY}
    assert sources_of_ready == {(E.PASS_BURN_IN, S.BURN_IN), (E.FINISH_SCRUB, S.SCRUBBING)}


def test_only_a_ready_node_can_be_allocated() -> None:
    """ALLOCATE is legal from READY alone and leads to ALLOCATED."""
    assert {s for (e, s) in TRANSITIONS if e is E.ALLOCATE} == {S.READY}
    assert next_state("n", S.READY, E.ALLOCATE) is S.ALLOCATED


def test_return_to_service_always_goes_through_burn_in() -> None:
    """RETURN_TO_SERVICE targets BURN_IN from every state that allows it."""
    targets = {t for (e, _), t in TRANSITIONS.items() if e is E.RETURN_TO_SERVICE}
    assert targets == {S.BURN_IN}


def test_drain_never_returns_a_node_to_service() -> None:
    """DRAIN moves a node out of service or keeps it held, never to READY or ALLOCATED."""
    for (event, _), target in TRANSITIONS.items():
        if event is E.DRAIN:
            assert target not in {S.READY, S.ALLOCATED, S.BURN_IN}


@given(st.lists(st.sampled_from(list(NodeEvent)), max_size=40))
def test_random_event_sequences_follow_the_table(events: list[NodeEvent]) -> None:
    """Applying any sequence of events either follows the table or raises IllegalTransition, leaving the state."""
    state = S.REGISTERED
    for event in events:
        expected = TRANSITIONS.get((event, state))
        if expected is None:
            with pytest.raises(IllegalTransition):
                next_state("node-x", state, event)
        else:
            state = next_state("node-x", state, event)
            assert state is expected
    assert state in set(NodeState)

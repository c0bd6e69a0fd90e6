"""Placement policies: first fit (all or nothing, in fabric order, independent of input order),
the spare choice nearest a replaced node, and the check every policy's choice passes before it is
allocated, spares held back."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.allocations.placement import POLICY, Candidate, PolicyError, choose, first_fit, nearest_to


def _key(c: Candidate) -> tuple[str, str, str, str]:
    return (c.zone, c.rack, c.leaf_switch, c.node_id)


def test_too_few_candidates_place_nothing() -> None:
    """Asking for more nodes than there are candidates returns None, not a partial list."""
    candidates = [Candidate(node_id=f"n{i}", zone="z", rack="r", leaf_switch="l") for i in range(3)]
    assert first_fit(candidates, 4) is None
    assert first_fit([], 1) is None


def test_exact_fit_takes_everything() -> None:
    """Asking for exactly as many nodes as candidates returns all of them."""
    candidates = [Candidate(node_id=f"n{i}", zone="z", rack="r", leaf_switch="l") for i in range(3)]
    assert sorted(first_fit(candidates, 3) or []) == ["n0", "n1", "n2"]


@pytest.mark.parametrize("count", [0, -1, -100])
def test_non_positive_count_is_refused(count: int) -> None:
    """A count below one is a ValueError, even with candidates available."""
    with pytest.raises(ValueError, match="positive"):
        first_fit([Candidate(node_id="n0", zone="z", rack="r", leaf_switch="l")], count)


def test_fabric_order_zone_then_rack_then_leaf_then_id() -> None:
    """Nodes are chosen by (zone, rack, leaf switch, node id), not by input order or id alone."""
    candidates = [
        Candidate(node_id="a-late-zone", zone="zone-b", rack="rack-0", leaf_switch="leaf-0"),
        Candidate(node_id="z-rack-1", zone="zone-a", rack="rack-1", leaf_switch="leaf-0"),
        Candidate(node_id="y-leaf-1", zone="zone-a", rack="rack-0", leaf_switch="leaf-1"),
        Candidate(node_id="x-first", zone="zone-a", rack="rack-0", leaf_switch="leaf-0"),
        Candidate(node_id="w-first", zone="zone-a", rack="rack-0", leaf_switch="leaf-0"),
    ]
    assert first_fit(candidates, 1) == ["w-first"]
    assert first_fit(candidates, 3) == ["w-first", "x-first", "y-leaf-1"]
    assert first_fit(candidates, 5) == ["w-first", "x-first", "y-leaf-1", "z-rack-1", "a-late-zone"]


def test_input_is_not_modified() -> None:
    """first_fit does not reorder the caller's list."""
    candidates = [
        Candidate(node_id="b", zone="z", rack="r", leaf_switch="l"),
        Candidate(node_id="a", zone="z", rack="r", leaf_switch="l"),
    ]
    before = list(candidates)
    first_fit(candidates, 1)
    assert candidates == before


_names = st.sampled_from(["a", "b", "c"])
_candidates = st.lists(
    st.builds(
        Candidate, node_id=st.text("abcdef0123", min_size=1, max_size=4), zone=_names, rack=_names, leaf_switch=_names
    ),
    max_size=20,
    unique_by=lambda c: c.node_id,
)


@settings(max_examples=200, deadline=None)
@given(_candidates, st.integers(min_value=1, max_value=25), st.randoms(use_true_random=False))
def test_first_fit_properties(candidates: list[Candidate], count: int, rnd: random.Random) -> None:
    """None iff too few; otherwise `count` distinct candidates, each before every unchosen one, in order."""
    result = first_fit(candidates, count)
    if len(candidates) < count:
        assert result is None
        return
    assert result is not None
    assert len(result) == count == len(set(result))
    by_id = {c.node_id: c for c in candidates}
    assert set(result) <= set(by_id)
    chosen_keys = [_key(by_id[i]) for i in result]
    assert chosen_keys == sorted(chosen_keys)
    unchosen = [_key(c) for c in candidates if c.node_id not in set(result)]
    if unchosen:
        assert max(chosen_keys) < min(unchosen)
    shuffled = list(candidates)
    rnd.shuffle(shuffled)
    assert first_fit(shuffled, count) == result


def test_first_fit_is_the_policy_in_use() -> None:
    """The create path places with POLICY, which is first fit unless changed."""
    assert POLICY is first_fit


_FOUR = [Candidate(node_id=f"n{i}", zone="z", rack="r", leaf_switch="l") for i in range(4)]


@pytest.mark.parametrize(
    "answer",
    [["n0"], ["n0", "n1", "n2"], ["n0", "n0"], ["n0", "a100-node"]],
    ids=["too-few", "too-many", "a-node-twice", "not-a-candidate"],
)
def test_a_policy_choice_that_is_not_count_distinct_candidates_is_refused(answer: list[str]) -> None:
    """Whatever a policy answers is checked before anything is allocated with it."""
    with pytest.raises(PolicyError, match="placement policy chose"):
        choose(lambda candidates, count: answer, _FOUR, 2)


def test_a_policy_choice_passes_through_as_given() -> None:
    """A valid choice comes back in the policy's order; a policy's None (no fit) stays None."""
    assert choose(lambda candidates, count: ["n3", "n1"], _FOUR, 2) == ["n3", "n1"]
    assert choose(lambda candidates, count: None, _FOUR, 2) is None
    assert choose(first_fit, _FOUR, 2) == ["n0", "n1"]


def test_a_choice_that_would_take_the_spares_is_refused_whichever_policy_chose() -> None:
    """``keep`` free candidates stay behind: five free with two kept places three, not four."""
    candidates = [Candidate(node_id=f"n{i}", zone="z", rack="r", leaf_switch="l") for i in range(5)]
    assert choose(first_fit, candidates, 3, keep=2) == ["n0", "n1", "n2"]
    assert choose(first_fit, candidates, 4, keep=2) is None
    assert choose(nearest_to(candidates[4]), candidates, 4, keep=2) is None
    assert choose(first_fit, candidates, 5) == [c.node_id for c in candidates]


def test_nearest_takes_the_same_leaf_switch_then_rack_then_zone_then_anywhere() -> None:
    """A spare for a node comes from under its leaf switch first, then its rack, then its
    zone; fabric order among equals, whatever the input order."""
    anchor = Candidate(zone="z1", rack="r2", leaf_switch="l2", node_id="gone")
    far = Candidate(zone="z0", rack="r0", leaf_switch="l0", node_id="a-far")
    zone = Candidate(zone="z1", rack="r9", leaf_switch="l9", node_id="b-zone")
    rack = Candidate(zone="z1", rack="r2", leaf_switch="l3", node_id="c-rack")
    leaf = [Candidate(zone="z1", rack="r3", leaf_switch="l2", node_id=f"d-leaf-{i}") for i in (2, 1)]
    candidates = [far, zone, rack, *leaf]
    near = nearest_to(anchor)
    assert near(candidates, 2) == ["d-leaf-1", "d-leaf-2"]
    assert near(candidates, 3) == ["d-leaf-1", "d-leaf-2", "c-rack"]
    assert near(candidates, 5) == ["d-leaf-1", "d-leaf-2", "c-rack", "b-zone", "a-far"]
    assert near([far, zone], 1) == ["b-zone"]
    assert near(candidates, 6) is None
    # First fit would have taken the far node: it is first in fabric order.
    assert first_fit(candidates, 1) == ["a-far"]

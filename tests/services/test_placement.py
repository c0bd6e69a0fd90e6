"""Placement over a pool of free nodes: first fit (all or nothing, in fabric order, independent of
input order) and the other policies of the scheduling package, configured per GPU model; the
spare choice nearest a replaced node; the pool's spares held back; and the check every policy's
choice passes before it is allocated."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduling
from scheduling import Cluster, Placement, WholeNodes
from services.allocations.placement import (
    DEFAULT_POLICIES,
    Candidate,
    Policies,
    PolicyError,
    Pool,
    UnknownPolicy,
    nearest_to,
)

FIRST_FIT = scheduling.POLICIES["first-fit"]


def _key(c: Candidate) -> tuple[str, str, str, str]:
    return (c.zone, c.rack, c.leaf_switch, c.node_id)


def choose(
    candidates: list[Candidate], count: int, policy: scheduling.Policy = FIRST_FIT, keep: int = 0
) -> list[str] | None:
    return Pool(candidates).choose(policy, count, tenant="acme", keep=keep)


def same_place(count: int) -> list[Candidate]:
    return [Candidate(node_id=f"n{i}", zone="z", rack="r", leaf_switch="l") for i in range(count)]


def test_too_few_candidates_place_nothing() -> None:
    """Asking for more nodes than there are candidates returns None, not a partial list."""
    assert choose(same_place(3), 4) is None
    assert choose([], 1) is None
    assert sorted(choose(same_place(3), 3) or []) == ["n0", "n1", "n2"]


@pytest.mark.parametrize("count", [0, -1, -100])
def test_non_positive_count_is_refused(count: int) -> None:
    """A count below one is a ValueError, even with candidates available."""
    with pytest.raises(ValueError, match="positive"):
        choose(same_place(1), count)


def test_first_fit_is_fabric_order_zone_then_rack_then_leaf_then_id() -> None:
    """Nodes are chosen by (zone, rack, leaf switch, node id), not by input order or id alone."""
    candidates = [
        Candidate(node_id="a-late-zone", zone="zone-b", rack="rack-0", leaf_switch="leaf-0"),
        Candidate(node_id="z-rack-1", zone="zone-a", rack="rack-1", leaf_switch="leaf-0"),
        Candidate(node_id="y-leaf-1", zone="zone-a", rack="rack-0", leaf_switch="leaf-1"),
        Candidate(node_id="x-first", zone="zone-a", rack="rack-0", leaf_switch="leaf-0"),
        Candidate(node_id="w-first", zone="zone-a", rack="rack-0", leaf_switch="leaf-0"),
    ]
    assert choose(candidates, 1) == ["w-first"]
    assert choose(candidates, 3) == ["w-first", "x-first", "y-leaf-1"]
    assert choose(candidates, 5) == ["w-first", "x-first", "y-leaf-1", "z-rack-1", "a-late-zone"]


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
    result = choose(candidates, count)
    if len(candidates) < count:
        assert result is None
        return
    assert result is not None
    assert len(result) == count == len(set(result))
    by_id = {c.node_id: c for c in candidates}
    chosen_keys = [_key(by_id[i]) for i in result]
    assert chosen_keys == sorted(chosen_keys)
    unchosen = [_key(c) for c in candidates if c.node_id not in set(result)]
    if unchosen:
        assert max(chosen_keys) < min(unchosen)
    shuffled = list(candidates)
    rnd.shuffle(shuffled)
    assert choose(shuffled, count) == result


def test_best_fit_packs_the_fullest_leaf_switch_that_holds_the_nodes() -> None:
    """Two free under leaf-a, five under leaf-b: first fit takes leaf-a's two and a node of
    leaf-b for three nodes, splitting them; best fit takes three under leaf-b, and two nodes
    from leaf-a, the fullest block that holds them."""
    candidates = [Candidate("z", "r0", "leaf-a", f"a{i}") for i in range(2)]
    candidates += [Candidate("z", "r1", "leaf-b", f"b{i}") for i in range(5)]
    best = scheduling.POLICIES["best-fit"]
    assert choose(candidates, 3) == ["a0", "a1", "b0"]
    assert choose(candidates, 3, best) == ["b0", "b1", "b2"]
    assert choose(candidates, 2, best) == ["a0", "a1"]


def test_nodes_taken_from_the_pool_are_not_chosen_again() -> None:
    """A group's creates choose from one pool, each after the one before took its nodes."""
    pool = Pool(same_place(5))
    first = pool.choose(FIRST_FIT, 2, tenant="acme")
    assert first == ["n0", "n1"]
    pool.take(first)
    assert pool.free == 3
    assert pool.choose(FIRST_FIT, 3, tenant="acme") == ["n2", "n3", "n4"]
    assert pool.choose(FIRST_FIT, 4, tenant="acme") is None


def test_a_choice_that_would_take_the_spares_is_refused_whichever_policy_chose() -> None:
    """``keep`` free nodes stay behind: five free with two kept places three, not four."""
    candidates = same_place(5)
    assert choose(candidates, 3, keep=2) == ["n0", "n1", "n2"]
    assert choose(candidates, 4, keep=2) is None
    assert choose(candidates, 4, nearest_to(candidates[4]), keep=2) is None
    assert choose(candidates, 5) == [c.node_id for c in candidates]


def _answering(nodes: tuple[str, ...]) -> scheduling.Policy:
    def policy(cluster: Cluster, request: scheduling.Request) -> Placement | None:
        assert isinstance(request, WholeNodes)
        return Placement(request, nodes)

    return policy


@pytest.mark.parametrize(
    "answer",
    [("n0",), ("n0", "n1", "n2"), ("n0", "n0"), ("n0", "a100-node"), ("n0", "n3")],
    ids=["too-few", "too-many", "a-node-twice", "not-a-candidate", "a-node-taken"],
)
def test_a_policy_choice_that_is_not_count_distinct_free_nodes_is_refused(answer: tuple[str, ...]) -> None:
    """Whatever a policy answers is checked before anything is allocated with it."""
    pool = Pool(same_place(4))
    pool.take(["n3"])
    with pytest.raises(PolicyError, match="placement policy chose"):
        pool.choose(_answering(answer), 2, tenant="acme")


def test_a_policy_choice_passes_through_as_given() -> None:
    """A valid choice comes back in the policy's order; a policy's None (no fit) stays None."""
    assert choose(same_place(4), 2, _answering(("n3", "n1"))) == ["n3", "n1"]
    assert choose(same_place(4), 2, lambda cluster, request: None) is None


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
    assert choose(candidates, 2, near) == ["d-leaf-1", "d-leaf-2"]
    assert choose(candidates, 3, near) == ["d-leaf-1", "d-leaf-2", "c-rack"]
    assert choose(candidates, 5, near) == ["d-leaf-1", "d-leaf-2", "c-rack", "b-zone", "a-far"]
    assert choose([far, zone], 1, near) == ["b-zone"]
    assert choose(candidates, 6, near) is None
    # First fit would have taken the far node: it is first in fabric order.
    assert choose(candidates, 1) == ["a-far"]


def test_nearest_within_the_leaf_switch_takes_nothing_outside_it() -> None:
    """A same_block allocation's spare: under the removed node's leaf switch, or none."""
    anchor = Candidate(zone="z1", rack="r2", leaf_switch="l2", node_id="gone")
    rack = Candidate(zone="z1", rack="r2", leaf_switch="l3", node_id="c-rack")
    leaf = Candidate(zone="z1", rack="r3", leaf_switch="l2", node_id="d-leaf")
    within = nearest_to(anchor, within_leaf=True)
    assert choose([rack, leaf], 1, within) == ["d-leaf"]
    assert choose([rack], 1, within) is None
    assert choose([rack, leaf], 2, within) is None


def test_each_pool_places_with_its_configured_policy() -> None:
    """First fit unless a pool's model names another; unknown names are refused, saying what is known."""
    assert DEFAULT_POLICIES.of("H100") is FIRST_FIT
    configured = Policies({"H100": "best-fit"})
    assert configured.of("H100") is scheduling.POLICIES["best-fit"]
    assert configured.of("A100") is FIRST_FIT
    with pytest.raises(UnknownPolicy, match="no placement policy 'tightest' for H100; known are first-fit"):
        Policies({"H100": "tightest"})
    with pytest.raises(UnknownPolicy, match="no GPU model 'H999'"):
        Policies({"H999": "best-fit"})

"""Choosing nodes for an allocation: pure functions over candidates, no I/O.

A policy is given every placeable node of the model (READY, neither cordoned nor unreachable) and chooses ``count``
of them, all or nothing: either ``count`` node ids or None. The store only supplies the
candidates and, on PostgreSQL, locks what the policy chose; it never cuts the list itself.

``POLICY`` is the one creates use: first fit in (zone, rack, leaf switch, node id) order, which
is deterministic, packs allocations onto neighbouring nodes, and is the baseline that
topology-aware policies replace. It is one for the whole process: the creates of one SQLite
group are placed together (set_based.py), in queue order, by the same rule each would meet alone.
A replacement chooses its spare with ``nearest_to`` the node it replaces.

``choose`` also holds the pool's spares back (spares.py): it refuses a choice that would leave
fewer free nodes than the reserve, whichever policy chose.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import NamedTuple


class Candidate(NamedTuple):
    """A free node placement may choose, by its place in the fabric: candidates compare in
    fabric order (zone, rack, leaf switch, then node id)."""

    zone: str
    rack: str
    leaf_switch: str
    node_id: str


# Chooses ``count`` of the candidates (their node ids, in the order the allocation lists
# them), or None when it finds no fit.
Policy = Callable[[Sequence[Candidate], int], list[str] | None]


class PolicyError(ValueError):
    """A policy answered something other than ``count`` distinct ids of its candidates."""


def first_fit(candidates: Sequence[Candidate], count: int) -> list[str] | None:
    """The first ``count`` candidates in fabric order, or None when there are too few."""
    if count <= 0:
        raise ValueError("count must be positive")
    if len(candidates) < count:
        return None
    # Documented equal to sorted(...)[:count], without sorting the rest; a candidate's own
    # order is fabric order, compared without a key function.
    return [c.node_id for c in heapq.nsmallest(count, candidates)]


POLICY: Policy = first_fit


def nearest_to(anchor: Candidate) -> Policy:
    """A policy choosing the candidates nearest ``anchor`` in the fabric: under its leaf switch,
    then in its rack, then in its zone, then anywhere; fabric order among equals. A spare
    near the node it replaces keeps the allocation's traffic on the switches it used."""

    def distance(c: Candidate) -> int:
        if c.zone != anchor.zone:
            return 3
        if c.leaf_switch == anchor.leaf_switch:
            return 0
        return 1 if c.rack == anchor.rack else 2

    def nearest(candidates: Sequence[Candidate], count: int) -> list[str] | None:
        if count <= 0:
            raise ValueError("count must be positive")
        if len(candidates) < count:
            return None
        return [c.node_id for c in heapq.nsmallest(count, candidates, key=lambda c: (distance(c), c))]

    return nearest


def choose(policy: Policy, candidates: Sequence[Candidate], count: int, *, keep: int = 0) -> list[str] | None:
    """``policy``'s choice of ``count`` candidates that leaves at least ``keep`` of them free
    (the pool's spares), or None. Checked: a node outside the candidates (another model's, one
    taken) or a node twice would be allocated as it stands, so it is refused here."""
    if len(candidates) - keep < count:
        return None
    chosen = policy(candidates, count)
    if chosen is None:
        return None
    if len(chosen) != count or len(set(chosen)) != count or not set(chosen) <= {c.node_id for c in candidates}:
        raise PolicyError(f"a placement policy chose {chosen!r} for {count} node(s) among its candidates")
    return chosen

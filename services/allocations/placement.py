"""Choosing nodes for an allocation: pure functions over candidates, no I/O.

A policy is given every placeable node of the model (READY, neither cordoned nor unreachable) and chooses ``count``
of them, all or nothing: either ``count`` node ids or None. The store only supplies the
candidates and, on PostgreSQL, locks what the policy chose; it never cuts the list itself.

``POLICY`` is the one in use: first fit in (zone, rack, leaf switch, node id) order, which is
deterministic, packs allocations onto neighbouring nodes, and is the baseline that
topology-aware policies replace. It is one for the whole process: the creates of one SQLite
group are placed together (set_based.py), in queue order, by the same rule each would meet alone.
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


def choose(policy: Policy, candidates: Sequence[Candidate], count: int) -> list[str] | None:
    """``policy``'s choice, checked: a node outside the candidates (another model's, one
    taken) or a node twice would be allocated as it stands, so it is refused here."""
    chosen = policy(candidates, count)
    if chosen is None:
        return None
    if len(chosen) != count or len(set(chosen)) != count or not set(chosen) <= {c.node_id for c in candidates}:
        raise PolicyError(f"a placement policy chose {chosen!r} for {count} node(s) among its candidates")
    return chosen

"""Choosing nodes for an allocation: a pure function over candidates, no I/O.

First fit in (zone, rack, leaf switch, node id) order: deterministic, packs allocations onto
neighbouring nodes, and is the baseline that topology-aware policies replace later. Placement
is all or nothing: either ``count`` nodes are returned or none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """A free node placement may choose, with its place in the fabric."""

    node_id: str
    zone: str
    rack: str
    leaf_switch: str


def first_fit(candidates: Sequence[Candidate], count: int) -> list[str] | None:
    """The first ``count`` candidates in fabric order, or None when there are too few."""
    if count <= 0:
        raise ValueError("count must be positive")
    if len(candidates) < count:
        return None
    ordered = sorted(candidates, key=lambda c: (c.zone, c.rack, c.leaf_switch, c.node_id))
    return [c.node_id for c in ordered[:count]]

"""A gang in the block with the most idle nodes, "where it has room": worst fit for blocks, which
breaks up the one block that could have held the next big gang."""

from __future__ import annotations

from collections.abc import Sequence

from exercises.allocation_policies.wrong._base import (
    Node,
    best_fit,
    first_fit,
    idle_by_block,
    largest_free_block,
    worst_fit,
)

__all__ = ["Node", "best_fit", "first_fit", "largest_free_block", "place_gang", "worst_fit"]


def place_gang(nodes: Sequence[Node], count: int) -> list[int] | None:
    """Wrong: the emptiest block that holds the gang, not the fullest."""
    holding = [idle for idle in idle_by_block(nodes).values() if len(idle) >= count]
    return max(holding, key=len)[:count] if holding else None

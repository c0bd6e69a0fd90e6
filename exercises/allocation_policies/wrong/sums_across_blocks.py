"""The largest free block as the idle nodes of the whole fleet: a gang that size would have to
cross the blocks' uplinks, so it cannot start inside one."""

from __future__ import annotations

from collections.abc import Sequence

from exercises.allocation_policies.wrong._base import Node, best_fit, first_fit, place_gang, worst_fit

__all__ = ["Node", "best_fit", "first_fit", "largest_free_block", "place_gang", "worst_fit"]


def largest_free_block(nodes: Sequence[Node]) -> int:
    """Wrong: idle nodes summed over every block."""
    return sum(node.idle for node in nodes)

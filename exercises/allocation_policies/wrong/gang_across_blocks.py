"""A gang on the first idle nodes in order, whatever their block: it runs over a block's end into
the next, and its traffic crosses the blocks' uplinks."""

from __future__ import annotations

from collections.abc import Sequence

from exercises.allocation_policies.wrong._base import Node, best_fit, first_fit, largest_free_block, worst_fit

__all__ = ["Node", "best_fit", "first_fit", "largest_free_block", "place_gang", "worst_fit"]


def place_gang(nodes: Sequence[Node], count: int) -> list[int] | None:
    """Wrong: the first ``count`` idle nodes of the fleet."""
    idle = [i for i, node in enumerate(nodes) if node.idle]
    return idle[:count] if len(idle) >= count else None

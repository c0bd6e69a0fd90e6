"""Best fit that takes the node with the most free GPUs, "so that the job surely fits": worst
fit under best fit's name, which spreads small jobs over the idle nodes."""

from __future__ import annotations

from collections.abc import Sequence

from exercises.allocation_policies.wrong._base import Node, first_fit, fits, largest_free_block, place_gang, worst_fit

__all__ = ["Node", "best_fit", "first_fit", "largest_free_block", "place_gang", "worst_fit"]


def best_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """Wrong: the most free GPUs left, not the fewest."""
    return max(fits(nodes, gpus), key=lambda i: (nodes[i].free, -i), default=None)

"""Best fit as "the node whose free GPUs are closest to the job's": the distance counts a node
with too few free GPUs as close too, and the job lands where it does not fit."""

from __future__ import annotations

from collections.abc import Sequence

from exercises.allocation_policies.wrong._base import Node, first_fit, largest_free_block, place_gang, worst_fit

__all__ = ["Node", "best_fit", "first_fit", "largest_free_block", "place_gang", "worst_fit"]


def best_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """Wrong: no filter on the nodes that fit; the nearest free count wins."""
    return min(range(len(nodes)), key=lambda i: abs(nodes[i].free - gpus), default=None)

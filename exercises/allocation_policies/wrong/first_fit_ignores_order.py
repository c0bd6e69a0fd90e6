"""First fit over the nodes sorted by their free GPUs, the fullest first "to keep the empty ones
for later": it is no longer the first node in the fabric's order."""

from __future__ import annotations

from collections.abc import Sequence

from exercises.allocation_policies.wrong._base import Node, best_fit, largest_free_block, place_gang, worst_fit

__all__ = ["Node", "best_fit", "first_fit", "largest_free_block", "place_gang", "worst_fit"]


def first_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """Wrong: scans the nodes in order of free GPUs, not in the list's order."""
    for i in sorted(range(len(nodes)), key=lambda i: nodes[i].free):
        if nodes[i].free >= gpus:
            return i
    return None

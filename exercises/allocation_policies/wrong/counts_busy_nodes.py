"""The largest free block counted over nodes with any GPU free: a node running a one-GPU job
counts as free, though no gang can use it."""

from __future__ import annotations

from collections.abc import Sequence

from exercises.allocation_policies.wrong._base import Node, best_fit, first_fit, place_gang, worst_fit

__all__ = ["Node", "best_fit", "first_fit", "largest_free_block", "place_gang", "worst_fit"]


def largest_free_block(nodes: Sequence[Node]) -> int:
    """Wrong: nodes with some GPUs free count, not only idle ones."""
    blocks: dict[int, int] = {}
    for node in nodes:
        blocks[node.block] = blocks.get(node.block, 0) + (node.free > 0)
    return max(blocks.values(), default=0)

"""A gang on nodes that have some GPUs free, not only on idle ones: its members share their
nodes with the jobs already there."""

from __future__ import annotations

from collections.abc import Sequence

from exercises.allocation_policies.wrong._base import Node, best_fit, first_fit, largest_free_block, worst_fit

__all__ = ["Node", "best_fit", "first_fit", "largest_free_block", "place_gang", "worst_fit"]


def place_gang(nodes: Sequence[Node], count: int) -> list[int] | None:
    """Wrong: a node with any GPU free counts as available to the gang."""
    blocks: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        blocks.setdefault(node.block, [])
        if node.free > 0:
            blocks[node.block].append(i)
    holding = [free for free in blocks.values() if len(free) >= count]
    return min(holding, key=len)[:count] if holding else None

"""Best fit that counts a node as fitting only with more free GPUs than the job asks (`>` for
`>=`): an exact fit, the best there is, is passed over."""

from __future__ import annotations

from collections.abc import Sequence

from exercises.allocation_policies.wrong._base import Node, first_fit, largest_free_block, place_gang, worst_fit

__all__ = ["Node", "best_fit", "first_fit", "largest_free_block", "place_gang", "worst_fit"]


def best_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """Wrong: a node with exactly ``gpus`` free is not taken."""
    roomy = [i for i, node in enumerate(nodes) if node.free > gpus]
    return min(roomy, key=lambda i: nodes[i].free - gpus, default=None)

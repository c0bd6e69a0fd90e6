"""A one-file answer that passes the suite, as a candidate might write it: each policy a filter
of the nodes that fit and a ``min`` with order as the tie-break, and the gang and the largest
free block from the idle nodes counted per block. Each known-wrong answer beside it changes one
rule of this one, so that the suite's verdict on it is about that rule alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    """A node: the GPUs it has, how many are free, and its fabric block."""

    gpus: int
    free: int
    block: int

    @property
    def idle(self) -> bool:
        """All its GPUs free."""
        return self.free == self.gpus


def fits(nodes: Sequence[Node], gpus: int) -> list[int]:
    """The nodes with at least ``gpus`` free, in order."""
    return [i for i, node in enumerate(nodes) if node.free >= gpus]


def first_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """The first node that fits."""
    return next(iter(fits(nodes, gpus)), None)


def best_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """The node left with the fewest free GPUs; ``min`` keeps the first of equals."""
    return min(fits(nodes, gpus), key=lambda i: nodes[i].free - gpus, default=None)


def worst_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """The node left with the most free GPUs, the first of equals."""
    return min(fits(nodes, gpus), key=lambda i: gpus - nodes[i].free, default=None)


def idle_by_block(nodes: Sequence[Node]) -> dict[int, list[int]]:
    """Each block's idle nodes, blocks in the order they come."""
    blocks: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        blocks.setdefault(node.block, [])
        if node.idle:
            blocks[node.block].append(i)
    return blocks


def place_gang(nodes: Sequence[Node], count: int) -> list[int] | None:
    """The first ``count`` idle nodes of the fullest block that holds them."""
    holding = [idle for idle in idle_by_block(nodes).values() if len(idle) >= count]
    if not holding:
        return None
    return min(holding, key=len)[:count]


def largest_free_block(nodes: Sequence[Node]) -> int:
    """The most idle nodes of one block."""
    return max((len(idle) for idle in idle_by_block(nodes).values()), default=0)

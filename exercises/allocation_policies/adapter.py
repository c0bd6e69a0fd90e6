"""The allocation-policies interface over the project's ``scheduling`` package, through what
``scheduling`` exports.

Each call makes the list of nodes a ``Cluster`` and asks the package once. Node ``i`` is the
``NodeSpec`` ``n000i`` of one GPU model in fabric block ``node.block``, named so that fabric
order is the list's order; every node has the same CPU and memory and no request asks for
either, so GPUs alone decide. A node's GPUs in use are taken by ``apply`` of whole-GPU
placements (in runs of 8, 4, 2 and 1, the sizes a request takes). Then ``first_fit``,
``best_fit`` and ``worst_fit`` are the package's policies on a ``Gpus`` request, ``place_gang``
is best fit on a ``WholeNodes`` request (the fullest block that holds the gang) and
``largest_free_block`` is the package's measure. No rule of placement is written here: which
nodes fit, which fits best, which block a gang goes to are the package's (docs/scheduling.md).

The one change of shape: where no block holds a gang, the package places it across blocks in
fabric order, and the interface answers None (a gang stays inside one block).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import scheduling

_MODEL = "GPU"
# Every node alike in CPU and memory, which no request asks for: only GPUs tell nodes apart.
_CPU_MILLI, _MEMORY_MIB = 1_000, 1_024
# The tenant of the GPUs a node already has in use, and of the jobs asked about.
_HELD, _JOB = "held", "job"
_RUNS = (8, 4, 2, 1)


@dataclass(frozen=True)
class Node:
    """A node: the GPUs it has, how many of them are free, and its fabric block."""

    gpus: int
    free: int
    block: int


def _cluster(nodes: Sequence[Node]) -> scheduling.Cluster:
    """The nodes as a cluster, each with ``gpus - free`` of its GPUs in use."""
    cluster = scheduling.Cluster(
        scheduling.NodeSpec(f"n{i:06d}", _MODEL, n.gpus, _CPU_MILLI, _MEMORY_MIB, block=str(n.block))
        for i, n in enumerate(nodes)
    )
    for spec, node in zip(cluster.nodes, nodes, strict=True):
        used = 0
        for run in _RUNS:
            while node.gpus - node.free - used >= run:
                held = scheduling.Gpus(tenant=_HELD, count=run)
                scheduling.apply(cluster, scheduling.Placement(held, (spec.node_id,), tuple(range(used, used + run))))
                used += run
    return cluster


def _one_node(policy: scheduling.Policy, nodes: Sequence[Node], gpus: int) -> int | None:
    cluster = _cluster(nodes)
    placed = policy(cluster, scheduling.Gpus(tenant=_JOB, count=gpus))
    return None if placed is None else cluster.index[placed.nodes[0]]


def first_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """``scheduling.first_fit`` of ``Gpus(count=gpus)``: the index of its node, or None."""
    return _one_node(scheduling.first_fit, nodes, gpus)


def best_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """``scheduling.best_fit`` of ``Gpus(count=gpus)``."""
    return _one_node(scheduling.best_fit, nodes, gpus)


def worst_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """``scheduling.worst_fit`` of ``Gpus(count=gpus)``."""
    return _one_node(scheduling.worst_fit, nodes, gpus)


def place_gang(nodes: Sequence[Node], count: int) -> list[int] | None:
    """``scheduling.best_fit`` of ``WholeNodes(count=count)``: its nodes' indexes, in order; None
    when it places none, or places them across blocks (no block holds them)."""
    cluster = _cluster(nodes)
    placed = scheduling.best_fit(cluster, scheduling.WholeNodes(tenant=_JOB, count=count))
    if placed is None:
        return None
    chosen = sorted(cluster.index[node_id] for node_id in placed.nodes)
    return chosen if len({nodes[i].block for i in chosen}) == 1 else None


def largest_free_block(nodes: Sequence[Node]) -> int:
    """``scheduling.largest_free_block``: the most idle nodes in one block."""
    return scheduling.largest_free_block(_cluster(nodes))

"""Choosing whole nodes: N idle nodes of one model. First fit takes the first N in fabric order,
exactly as the server's whole-node placement does; the block-aware choices keep jobs inside one
fabric block, in the fullest block that still holds them (packing) or the emptiest (spreading).
A request for one block (``same_block``) is placed in a block that holds it, or not at all."""

from __future__ import annotations

from typing import Literal

import numpy as np

from scheduling.fit import feasible
from scheduling.model import Cluster, Ints
from scheduling.placement import Placement
from scheduling.requests import WholeNodes

BlockRule = Literal["fabric", "fullest", "emptiest"]


def _in_fabric_order(cluster: Cluster, rows: Ints) -> Ints:
    return rows[np.argsort(cluster.rank[rows], kind="stable")]


def _from_blocks(cluster: Cluster, rows: Ints, count: int, rule: BlockRule, *, same_block: bool) -> Ints | None:
    """``count`` of ``rows`` (idle nodes of one model, at least ``count``) by ``rule``; None
    when ``same_block`` and no block holds ``count`` of them."""
    ordered = _in_fabric_order(cluster, rows)
    if rule == "fabric" and not same_block:
        return ordered[:count]
    blocks = cluster.block[ordered]
    sizes = np.bincount(blocks, minlength=cluster.block_count)
    holding = np.flatnonzero(sizes >= count)
    if holding.size == 0:
        # No block holds the job: the nearest nodes in fabric order, unless it must not spread.
        return None if same_block else ordered[:count]
    if rule == "fabric":
        # The first block in fabric order that holds it.
        block = next(b for b in blocks if sizes[b] >= count)
        return np.asarray(ordered[blocks == block][:count], dtype=np.int64)
    size = sizes[holding].min() if rule == "fullest" else sizes[holding].max()
    # Among blocks of that size, the one whose first node comes first in fabric order.
    block = next(b for b in blocks if sizes[b] == size)
    return np.asarray(ordered[blocks == block][:count], dtype=np.int64)


def choose_nodes(cluster: Cluster, request: WholeNodes, rule: BlockRule) -> Placement | None:
    """Whole nodes for ``request``, all of the first accepted model (in the request's order, else
    the cluster's) that has enough idle nodes; None when no model has."""
    idle = feasible(cluster, request)
    for model in request.models or cluster.models:
        if model not in cluster.models:
            continue
        rows = np.flatnonzero(idle & (cluster.model == cluster.models.index(model)))
        if rows.size >= request.count:
            chosen = _from_blocks(cluster, rows, request.count, rule, same_block=request.same_block)
            if chosen is not None:
                return Placement(request, tuple(cluster.nodes[i].node_id for i in chosen))
    return None

"""Choosing nodes for an allocation: the scheduling package's policies over the free nodes the
store supplies. No I/O.

The store reads every placeable node of a model (READY, neither cordoned nor unreachable) as a
``Candidate``; ``Pool`` turns them into the scheduling package's cluster (a fabric block per
leaf switch) and a policy chooses ``count`` of them, all or nothing: either ``count`` node ids
or None. The store never cuts the list itself, and on PostgreSQL locks what was chosen. A
scheduling cycle places its queue's allocations from one pool, in queue order, each taking its
nodes before the next chooses.

Which policy a pool's creates use is configuration (``Policies``, ``gpucloud serve
--placement MODEL=POLICY``): first fit by default, in (zone, rack, leaf switch, node id) order,
which is deterministic and packs allocations onto neighbouring nodes. A replacement chooses its
spare with ``nearest_to`` the node it replaces.

``Pool.choose`` also holds the pool's spares back (spares.py): it refuses a choice that would
leave fewer free nodes than the reserve, whichever policy chose, and checks that the policy
answered ``count`` distinct free nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

import scheduling
from scheduling import Cluster, NodeSpec, Placement, WholeNodes
from services.nodes.inventory import GpuModel

# The pool's nodes as the cluster model needs them: whole-node placement weighs no CPU, memory
# or GPU count, every candidate being idle and of the pool's one model.
_POOL_MODEL = "pool"
_NODE_GPUS = 8

DEFAULT_POLICY = "first-fit"


class Candidate(NamedTuple):
    """A free node placement may choose, by its place in the fabric."""

    zone: str
    rack: str
    leaf_switch: str
    node_id: str


class PolicyError(ValueError):
    """A policy answered something other than ``count`` distinct free nodes of its pool."""


class UnknownPolicy(ValueError):
    """A policy name the scheduling package does not have, or one given for an unknown model."""


class Pool:
    """The free nodes of one GPU model, from which choices are taken as they are made."""

    def __init__(self, candidates: Iterable[Candidate]) -> None:
        # Positional, a block per leaf switch: a pool is built per create group, and keywords
        # made a node's tuple cost twice as much (a pool of 128 nodes: 238 us, the tuples 78).
        self._cluster = Cluster(
            NodeSpec(node_id, _POOL_MODEL, _NODE_GPUS, 0, 0, zone, leaf, rack, leaf)
            for zone, rack, leaf, node_id in candidates
        )
        # The ids still free, for checking a policy's answer without a pass over the arrays.
        self._free_ids = set(self._cluster.index)

    @property
    def free(self) -> int:
        """How many of the pool's nodes are still free."""
        return len(self._free_ids)

    @property
    def largest_free_block(self) -> int:
        """The most free nodes under one leaf switch: the largest gang ``same_block`` can place."""
        return scheduling.largest_free_block(self._cluster)

    def choose(
        self, policy: scheduling.Policy, count: int, *, tenant: str, keep: int = 0, same_block: bool = False
    ) -> list[str] | None:
        """``policy``'s choice of ``count`` free nodes for ``tenant`` that leaves at least
        ``keep`` free (the pool's spares), all under one leaf switch when ``same_block``, or
        None. Checked: a node outside the pool (another model's, one taken) or a node twice
        would be allocated as it stands."""
        if count <= 0:
            raise ValueError("count must be positive")
        if self.free - keep < count:
            return None
        placed = policy(self._cluster, WholeNodes(tenant=tenant, count=count, same_block=same_block))
        if placed is None:
            return None
        chosen = list(placed.nodes)
        if len(chosen) != count or len(set(chosen)) != count or not self._free_ids.issuperset(chosen):
            raise PolicyError(f"a placement policy chose {chosen!r} for {count} node(s) among its free nodes")
        if same_block and len({self._cluster.nodes[self._cluster.index[n]].leaf_switch for n in chosen}) > 1:
            raise PolicyError(f"a placement policy chose {chosen!r} across leaf switches for one that asked for one")
        return chosen

    def candidate(self, node_id: str) -> Candidate:
        """The pool's node ``node_id``, by its place in the fabric."""
        node = self._cluster.nodes[self._cluster.index[node_id]]
        return Candidate(node.zone, node.rack, node.leaf_switch, node.node_id)

    def take(self, node_ids: Sequence[str]) -> None:
        """``node_ids`` are no longer free (chosen by this pool, or taken by another transaction)."""
        taken = [n for n in node_ids if n in self._free_ids]
        if taken:
            scheduling.apply(self._cluster, Placement(WholeNodes(tenant=_POOL_MODEL, count=len(taken)), tuple(taken)))
            self._free_ids.difference_update(taken)


def nearest_to(anchor: Candidate, *, within_leaf: bool = False) -> scheduling.Policy:
    """A policy choosing the free nodes nearest ``anchor`` in the fabric: under its leaf switch,
    then in its rack, then in its zone, then anywhere (only under its leaf switch when
    ``within_leaf``); fabric order among equals. A spare near the node it replaces keeps the
    allocation's traffic on the switches it used; one of a ``same_block`` allocation must
    stay under its switch."""

    def distance(node: NodeSpec) -> int:
        if node.zone != anchor.zone:
            return 3
        if node.leaf_switch == anchor.leaf_switch:
            return 0
        return 1 if node.rack == anchor.rack else 2

    def nearest(cluster: Cluster, request: scheduling.Request) -> Placement | None:
        if not isinstance(request, WholeNodes):
            return None
        idle = [int(i) for i in np.flatnonzero(cluster.idle())]
        if within_leaf:
            idle = [i for i in idle if cluster.nodes[i].leaf_switch == anchor.leaf_switch]
        if len(idle) < request.count:
            return None
        idle.sort(key=lambda i: (distance(cluster.nodes[i]), int(cluster.rank[i])))
        return Placement(request, tuple(cluster.nodes[i].node_id for i in idle[: request.count]))

    return nearest


@dataclass(frozen=True)
class Policies:
    """The placement policy of each pool (GPU model), by the scheduling package's names;
    ``default`` for a pool not named."""

    by_model: Mapping[str, str] = field(default_factory=dict)
    default: str = DEFAULT_POLICY

    def __post_init__(self) -> None:
        known = ", ".join(scheduling.POLICIES)
        models = {model.value for model in GpuModel}
        for model, name in [*self.by_model.items(), ("", self.default)]:
            if model and model not in models:
                raise UnknownPolicy(f"no GPU model {model!r}; known are {', '.join(sorted(models))}")
            if name not in scheduling.POLICIES:
                where = f" for {model}" if model else ""
                raise UnknownPolicy(f"no placement policy {name!r}{where}; known are {known}")

    def of(self, gpu_model: str) -> scheduling.Policy:
        """The policy ``gpu_model``'s creates place with."""
        return scheduling.POLICIES[self.by_model.get(gpu_model, self.default)]


DEFAULT_POLICIES = Policies()

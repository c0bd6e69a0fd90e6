"""Placing part-node allocations: whole GPUs, one MIG slice or a soft share of a GPU, or CPU and
memory alone, all on one node of a model. No I/O.

A node that holds part-node allocations is a shared node: ALLOCATED from the first hold placed
on it until the last is released, then scrubbed like any node (releaser.py). ``SharedNodes``
is the scheduling package's cluster of a model's shared nodes with every live hold applied,
so the package's rules (a GPU's soft shares and MIG slices are one tenant's, MIG slices at
NVIDIA's start positions, CPU and memory beside the GPUs) decide what fits. A request goes to
a shared node first, as the pool's policy chooses; only when none has room does it open a free
node of the pool (as the policy chooses one whole node, leaving the spares), so part-node work
packs onto nodes already shared and whole nodes stay free for gangs.

Registration reports GPUs, not CPU or memory, so a node's CPU and memory are its model's
(``NODE_SHAPES``: the eight-GPU servers of each model as sold).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import scheduling
from scheduling import Cluster, CpuOnly, Gpus, MigSlice, NodeSpec, Placement, Share
from services.allocations.placement import Candidate, Pool
from services.allocations.repository import Allocation
from services.nodes.inventory import GPUS_PER_NODE, GpuModel


class NodeShape(NamedTuple):
    """What one node of a model offers beside its eight GPUs."""

    cpu_milli: int
    memory_mib: int
    mig: bool


NODE_SHAPES: dict[GpuModel, NodeShape] = {
    # DGX A100: 2 x 64 cores, 1 TiB; DGX H100 and H200: 2 x 56 cores, 2 TiB; DGX B200:
    # 2 x 56 cores, 4 TiB; an L40S server: 2 x 32 cores, 768 GiB, and no MIG.
    GpuModel.A100: NodeShape(128_000, 1_048_576, mig=True),
    GpuModel.H100: NodeShape(112_000, 2_097_152, mig=True),
    GpuModel.H200: NodeShape(112_000, 2_097_152, mig=True),
    GpuModel.B200: NodeShape(112_000, 4_194_304, mig=True),
    GpuModel.L40S: NodeShape(64_000, 786_432, mig=False),
}


def request_of(row: Allocation) -> scheduling.Request:
    """The scheduling package's request for a part-node allocation."""
    tenant, cpu, memory = row.tenant_id, row.cpu_milli, row.memory_mib
    if row.gpus:
        return Gpus(tenant=tenant, cpu_milli=cpu, memory_mib=memory, count=row.gpus)
    if row.mig_profile:
        return MigSlice(tenant=tenant, cpu_milli=cpu, memory_mib=memory, profile=row.mig_profile)
    if row.share_milli:
        return Share(tenant=tenant, cpu_milli=cpu, memory_mib=memory, milli=row.share_milli)
    return CpuOnly(tenant=tenant, cpu_milli=cpu, memory_mib=memory)


def gpu_milli(row: Allocation) -> int:
    """The thousandths of a GPU each of its GPUs is held by, what it is billed by (0 for CPU
    and memory alone)."""
    # The scheduling package's thousandths of the whole request, spread over its whole GPUs.
    return scheduling.gpu_milli(request_of(row)) // (row.gpus or 1)


def describe(row: Allocation) -> str:
    """What it asks for, in words: "3 H100 node(s)", "2 H100 GPU(s) on one node", "a 3g.40gb
    MIG slice of an H100 GPU"."""
    if not row.part_node:
        return f"{row.node_count} {row.gpu_model} node(s)"
    if row.gpus:
        what = f"{row.gpus} {row.gpu_model} GPU(s) on one node"
    elif row.mig_profile:
        what = f"a {row.mig_profile} MIG slice of an {row.gpu_model} GPU"
    elif row.share_milli:
        what = f"a {row.share_milli}/1000 share of an {row.gpu_model} GPU"
    else:
        what = f"CPU and memory on an {row.gpu_model} node"
    extra = [f"{row.cpu_milli / 1000:g} CPU"] * bool(row.cpu_milli) + [f"{row.memory_mib} MiB"] * bool(row.memory_mib)
    return what + (f" with {' and '.join(extra)}" if extra else "")


def spec(candidate: Candidate, gpu_model: GpuModel) -> NodeSpec:
    """A node of ``gpu_model`` as the cluster model needs it."""
    shape = NODE_SHAPES[gpu_model]
    return NodeSpec(
        candidate.node_id,
        gpu_model.value,
        GPUS_PER_NODE,
        shape.cpu_milli,
        shape.memory_mib,
        zone=candidate.zone,
        block=candidate.leaf_switch,
        rack=candidate.rack,
        leaf_switch=candidate.leaf_switch,
        mig=shape.mig,
    )


def never_fits(gpu_model: GpuModel, *, mig_profile: str, cpu_milli: int, memory_mib: int) -> tuple[str, str] | None:
    """Why no node of ``gpu_model`` could ever hold such a request, even empty, as (the field
    at fault, why); None when one could."""
    shape = NODE_SHAPES[gpu_model]
    if mig_profile and not shape.mig:
        return "mig_profile", f"{gpu_model} GPUs take no MIG slices"
    if cpu_milli > shape.cpu_milli:
        return "cpu_milli", f"an {gpu_model} node has {shape.cpu_milli / 1000:g} CPU in all, {cpu_milli / 1000:g} asked"
    if memory_mib > shape.memory_mib:
        return "memory_mib", f"an {gpu_model} node has {shape.memory_mib} MiB of memory in all, {memory_mib} asked"
    return None


class LiveHold(NamedTuple):
    """A live hold as a cycle reads it: the allocation, and what it holds of one GPU (index -1:
    no GPU) of one node."""

    row: Allocation
    node_id: str
    gpu_index: int
    mig_start: int


@dataclass(frozen=True, slots=True)
class PartPlacement:
    """Where a part-node allocation goes: its node, the GPUs it takes there (by index, with the
    thousandths of each), a MIG slice's start, and whether the node was free until now (it
    turns ALLOCATED with this admission)."""

    row: Allocation
    node_id: str
    gpus: tuple[int, ...]
    milli: int
    mig_start: int
    opened: bool


class SharedNodes:
    """A model's shared nodes and what is free on them, taking placements as they are made."""

    def __init__(self, gpu_model: GpuModel, nodes: Iterable[Candidate], holds: Iterable[LiveHold]) -> None:
        self._model = gpu_model
        self._cluster = Cluster(spec(node, gpu_model) for node in nodes)
        for placement in _placements(holds):
            scheduling.apply(self._cluster, placement)

    @property
    def nodes(self) -> int:
        """How many shared nodes there are."""
        return len(self._cluster)

    @property
    def free_gpus(self) -> int:
        """Whole GPUs free on the shared nodes."""
        return int(self._cluster.whole_gpus_free().sum())

    @property
    def most_free_on_one(self) -> int:
        """The most whole GPUs free on any one shared node."""
        return int(self._cluster.whole_gpus_free().max(initial=0))

    def fits(self, policy: scheduling.Policy, row: Allocation) -> bool:
        """Whether some shared node has room for ``row`` now (nothing is taken)."""
        return policy(self._cluster, request_of(row)) is not None

    def place(self, policy: scheduling.Policy, row: Allocation) -> PartPlacement | None:
        """``policy``'s choice for ``row`` among the shared nodes, taken; None when none has room."""
        placed = policy(self._cluster, request_of(row))
        return None if placed is None else self._take(row, placed, opened=False)

    def open(self, policy: scheduling.Policy, row: Allocation, pool: Pool, *, keep: int) -> PartPlacement | None:
        """A free node of ``pool`` chosen by ``policy`` (leaving ``keep`` free), made shared
        with ``row`` placed on it; None when the pool has none to give."""
        chosen = pool.choose(policy, 1, tenant=row.tenant_id, keep=keep)
        if chosen is None:
            return None
        pool.take(chosen)
        self._cluster = self._cluster.extended([spec(pool.candidate(chosen[0]), self._model)])
        placed = policy(self._cluster, request_of(row))
        if placed is None or placed.nodes != tuple(chosen):
            # never_fits() ruled out a request no empty node holds, and no shared node had room.
            raise AssertionError(f"{row.allocation_id} placed {placed} rather than on the node opened for it")
        return self._take(row, placed, opened=True)

    def _take(self, row: Allocation, placed: Placement, *, opened: bool) -> PartPlacement:
        scheduling.apply(self._cluster, placed)
        start = -1 if placed.mig_start is None else placed.mig_start
        return PartPlacement(row, placed.nodes[0], placed.gpus, gpu_milli(row), start, opened)


def _placements(holds: Iterable[LiveHold]) -> list[Placement]:
    """The placements the live holds make, one per allocation."""
    by_allocation: dict[str, list[LiveHold]] = {}
    for hold in holds:
        by_allocation.setdefault(hold.row.allocation_id, []).append(hold)
    placements = []
    for held in by_allocation.values():
        row = held[0].row
        gpus: Sequence[int] = sorted(h.gpu_index for h in held if h.gpu_index >= 0)
        start = held[0].mig_start if row.mig_profile else None
        placements.append(Placement(request_of(row), (held[0].node_id,), tuple(gpus), start))
    return placements

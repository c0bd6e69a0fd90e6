"""Fragmentation as Fragmentation Gradient Descent measures it (Weng et al., USENIX ATC '23).

A node's free GPU capacity is a fragment for a task shape when the task cannot run there (too
few GPUs with enough free, too little CPU or memory, a model it does not accept): then all of it is; when
the task can run, the GPUs with less free than the task uses on each GPU are. A node's
fragmentation is the expectation over the workload mix, and a placement's cost is how much it
raises its node's fragmentation: every other node is unchanged.

Each node is summarised per shape by its free total T, the free on GPUs too small for the shape
S, and the count of GPUs big enough C; a placement changes these by a few terms, so its cost
for every candidate node (and, for a share, every GPU) is a handful of array operations.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from scheduling.fit import usable_gpus
from scheduling.model import MILLI, Cluster, Ints
from scheduling.requests import Gpus, Request, Share
from scheduling.workload import WorkloadMix

Floats = npt.NDArray[np.float64]


class _MixArrays(NamedTuple):
    cpu: Ints  # (K,)
    memory: Ints  # (K,)
    milli: Ints  # (K,)
    gpus: Ints  # (K,)
    weight: Floats  # (K,)
    access: npt.NDArray[np.bool_]  # (K, models): shape k accepts model m


@lru_cache(maxsize=32)
def _arrays(mix: WorkloadMix, models: tuple[str, ...]) -> _MixArrays:
    access = np.array([[not s.models or m in s.models for m in models] for s in mix.shapes], dtype=np.bool_)
    return _MixArrays(
        np.array([s.cpu_milli for s in mix.shapes], dtype=np.int64),
        np.array([s.memory_mib for s in mix.shapes], dtype=np.int64),
        np.array([s.gpu_milli for s in mix.shapes], dtype=np.int64),
        np.array([s.gpus for s in mix.shapes], dtype=np.int64),
        np.array(mix.weights, dtype=np.float64),
        access.reshape(len(mix.shapes), len(models)),
    )


def _free(cluster: Cluster, nodes: Ints) -> Ints:
    """Free thousandths per GPU that soft shares and whole GPUs can use: a GPU in MIG mode
    serves only MIG slices, which the measure leaves out."""
    return np.where(cluster.mig_layout[nodes] == 0, cluster.gpu_free[nodes], 0)


def _expected(
    arrays: _MixArrays,
    access: npt.NDArray[np.bool_],
    host: tuple[Ints, Ints],
    total: Floats,
    small: Floats,
    big_enough: Ints,
) -> Floats:
    """Expected fragmentation from the per-shape summaries: shapes on axis 0, then nodes (and
    GPUs, for a share's candidates); ``access``, ``host`` (CPU and memory free) and ``total``
    broadcast to them."""
    extra = (1,) * (small.ndim - 1)
    cpu, memory = host
    runs = (
        access
        & (big_enough >= arrays.gpus.reshape(-1, *extra))
        & (cpu[None] >= arrays.cpu.reshape(-1, *extra))
        & (memory[None] >= arrays.memory.reshape(-1, *extra))
    )
    return np.tensordot(arrays.weight, np.where(runs, small, total[None]), axes=1)


def _summaries(free: Ints, arrays: _MixArrays) -> tuple[Floats, Floats, Ints]:
    total = free.sum(axis=1).astype(np.float64)
    big = free[None] >= arrays.milli[:, None, None]
    small = total[None] - np.where(big, free[None], 0).sum(axis=2)
    return total, small, np.count_nonzero(big, axis=2)


def node_fragmentation(cluster: Cluster, mix: WorkloadMix, nodes: Ints | None = None) -> Floats:
    """Each node's expected fragmented GPU capacity for ``mix``, in thousandths of a GPU."""
    rows = np.arange(len(cluster)) if nodes is None else nodes
    arrays = _arrays(mix, cluster.models)
    total, small, big = _summaries(_free(cluster, rows), arrays)
    host = (cluster.cpu_free[rows], cluster.memory_free[rows])
    return _expected(arrays, arrays.access[:, cluster.model[rows]], host, total, small, big)


def placement_costs(cluster: Cluster, request: Request, nodes: Ints, mix: WorkloadMix) -> Floats:
    """How much placing ``request`` raises fragmentation for ``mix`` on each of ``nodes`` (which
    must host it): shape (nodes,) or, for a share, (nodes, GPUs) with +inf on GPUs it cannot use.

    A cost depends only on a node's state (model, CPU, memory, free per GPU), and many nodes
    share one (every idle node of a kind does), so each distinct state is costed once."""
    free = _free(cluster, nodes)
    state = np.column_stack((cluster.model[nodes], cluster.cpu_free[nodes], cluster.memory_free[nodes], free))
    distinct, where = np.unique(state, axis=0, return_inverse=True)
    costs = _state_costs(_arrays(mix, cluster.models), request, distinct)[where.reshape(-1)]
    if isinstance(request, Share):
        return np.where(usable_gpus(cluster, request)[nodes], costs, np.inf)
    return costs


def _state_costs(arrays: _MixArrays, request: Request, state: Ints) -> Floats:
    """``placement_costs`` for node states laid out as columns: model, CPU, memory, free per GPU."""
    model, cpu, memory, free = state[:, 0], state[:, 1], state[:, 2], state[:, 3:]
    access = arrays.access[:, model]
    total, small, big = _summaries(free, arrays)
    before = _expected(arrays, access, (cpu, memory), total, small, big)
    after_host = (cpu - request.cpu_milli, memory - request.memory_mib)
    if not isinstance(request, Share):
        # Whole GPUs (or none): the GPUs taken were big enough for every shape and were not
        # counted in S, so S stays and C falls by the GPUs taken.
        taken = request.count if isinstance(request, Gpus) else 0
        after = _expected(arrays, access, after_host, total - MILLI * taken, small, big - taken)
        return after - before
    milli = arrays.milli[:, None, None]
    was, now = free[None], free[None] - request.milli
    small_after = small[:, :, None] - np.where(was < milli, was, 0) + np.where(now < milli, now, 0)
    big_after = big[:, :, None] - (was >= milli) + (now >= milli)
    after = _expected(
        arrays,
        access[:, :, None],
        (after_host[0][:, None], after_host[1][:, None]),
        total[:, None] - request.milli,
        small_after,
        big_after,
    )
    return np.asarray(after - before[:, None], dtype=np.float64)

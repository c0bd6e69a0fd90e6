"""Where a request can go: the nodes that can host it, and the GPUs on a node it can use, each
as a boolean array computed over all nodes at once."""

from __future__ import annotations

from typing import Literal

import numpy as np

from scheduling import mig
from scheduling.model import MILLI, NO_TENANT, Bools, Cluster
from scheduling.requests import CpuOnly, Gpus, MigSlice, Request, Share, WholeNodes

# How a policy picks among the GPUs of its node that fit: the lowest index, the one with the
# least left (packing), or the one with the most left (spreading).
GpuRule = Literal["first", "tightest", "loosest"]


def usable_gpus(cluster: Cluster, request: Request) -> Bools:
    """(nodes, GPUs): the GPUs the request could use, before CPU, memory and GPU counts."""
    return np.asarray(_usable(cluster, request), dtype=np.bool_)


def _usable(cluster: Cluster, request: Request) -> object:
    if isinstance(request, Gpus):
        return cluster.gpu_free == MILLI
    tenant = cluster.tenants.get(request.tenant, -2)  # a tenant never seen holds nothing
    if isinstance(request, Share):
        owner_ok = (cluster.share_tenant == NO_TENANT) | (cluster.share_tenant == tenant)
        return (cluster.gpu_free >= request.milli) & (cluster.mig_layout == 0) & owner_ok
    if isinstance(request, MigSlice):
        owner_ok = (cluster.mig_tenant == NO_TENANT) | (cluster.mig_tenant == tenant)
        room = mig.FITS[request.profile][cluster.mig_layout]
        # In MIG mode already, or wholly free: not a GPU taken whole or holding shares.
        mig_or_free = (cluster.mig_layout != 0) | (cluster.gpu_free == MILLI)
        return cluster.mig_capable[:, None] & cluster.gpu_exists & mig_or_free & owner_ok & room
    return np.zeros(cluster.gpu_exists.shape, dtype=np.bool_)


def feasible(cluster: Cluster, request: Request) -> Bools:
    """Nodes that can host ``request`` now (for whole nodes: the idle nodes it accepts)."""
    ok = cluster.accepting(request.models)
    if isinstance(request, WholeNodes):
        ok &= cluster.idle()
        return ok
    ok &= (cluster.cpu_free >= request.cpu_milli) & (cluster.memory_free >= request.memory_mib)
    if not isinstance(request, CpuOnly):
        need = request.count if isinstance(request, Gpus) else 1
        ok &= np.count_nonzero(usable_gpus(cluster, request), axis=1) >= need
    return ok


def gpus_on(cluster: Cluster, request: Request, node: int, rule: GpuRule) -> tuple[tuple[int, ...], int | None]:
    """The GPUs (and, for a MIG slice, the start) ``request`` takes on ``node``, a node that
    ``feasible`` accepts. Whole GPUs are interchangeable: the lowest free indices."""
    if isinstance(request, WholeNodes | CpuOnly):
        return (), None
    usable = np.flatnonzero(usable_gpus(cluster, request)[node])
    if isinstance(request, Gpus):
        return tuple(int(g) for g in usable[: request.count]), None
    left = cluster.gpu_free[node, usable]
    # argmin and argmax answer the lowest index on ties.
    pick = {"first": 0, "tightest": int(np.argmin(left)), "loosest": int(np.argmax(left))}[rule]
    gpu = int(usable[pick])
    if isinstance(request, MigSlice):
        prof = mig.profile(request.profile)
        layout = int(cluster.mig_layout[node, gpu])
        start = mig.starts_free(layout, prof)[0] if rule == "first" else mig.best_start(layout, prof)
        return (gpu,), start
    return (gpu,), None

"""A placement, and applying it to and releasing it from the cluster: the only code that changes
the cluster's free capacity."""

from __future__ import annotations

from dataclasses import dataclass

from scheduling import mig
from scheduling.errors import PlacementConflict
from scheduling.model import MILLI, NO_TENANT, Cluster
from scheduling.requests import CpuOnly, Gpus, MigSlice, Request, Share, WholeNodes


@dataclass(frozen=True)
class Placement:
    """Where a request goes: its nodes (one, except for whole nodes), the GPUs it takes on that
    node, and for a MIG slice the memory slice its instance starts at."""

    request: Request
    nodes: tuple[str, ...]
    gpus: tuple[int, ...] = ()
    mig_start: int | None = None


def _conflict(cluster: Cluster, p: Placement) -> str | None:
    """Why ``p`` does not fit the cluster as it is, or None when it does."""
    r = p.request
    if not all(n in cluster.index for n in p.nodes):
        return f"unknown node among {p.nodes}"
    rows = [cluster.index[n] for n in p.nodes]
    if not all(r.accepts(cluster.nodes[i].model) for i in rows):
        return "a node of a model the request does not accept"
    if isinstance(r, WholeNodes):
        busy = ~cluster.idle()
        if len(set(rows)) != r.count or any(busy[i] for i in rows):
            return f"whole nodes {p.nodes} are not {r.count} distinct idle nodes"
        return None
    if len(rows) != 1:
        return "a request other than whole nodes takes exactly one node"
    i = rows[0]
    if cluster.cpu_free[i] < r.cpu_milli or cluster.memory_free[i] < r.memory_mib:
        return f"not enough CPU or memory left on {p.nodes[0]}"
    return _gpu_conflict(cluster, p, i)


def _gpu_conflict(cluster: Cluster, p: Placement, i: int) -> str | None:
    r = p.request
    expected = {Gpus: r.count if isinstance(r, Gpus) else 0, Share: 1, MigSlice: 1, CpuOnly: 0}[type(r)]
    if len(set(p.gpus)) != expected or len(p.gpus) != expected:
        return f"{type(r).__name__} takes {expected} distinct GPU(s), not {p.gpus}"
    if not all(0 <= g < cluster.gpu_count[i] for g in p.gpus):
        return f"no GPU {p.gpus} on {p.nodes[0]}"
    tenant = cluster.tenants.get(r.tenant, NO_TENANT)
    if isinstance(r, Gpus):
        return None if all(cluster.gpu_free[i, g] == MILLI for g in p.gpus) else "a GPU is not free"
    if isinstance(r, Share):
        g = p.gpus[0]
        if cluster.mig_layout[i, g] or cluster.gpu_free[i, g] < r.milli:
            return "the GPU has less free than the share, or is in MIG mode"
        return None if cluster.share_tenant[i, g] in (NO_TENANT, tenant) else "the GPU holds another tenant's share"
    if isinstance(r, MigSlice):
        g, prof = p.gpus[0], mig.profile(r.profile)
        if not cluster.mig_capable[i] or (cluster.mig_layout[i, g] == 0 and cluster.gpu_free[i, g] != MILLI):
            return "the GPU takes no MIG slices (not MIG capable, or taken whole or by soft shares)"
        if cluster.mig_tenant[i, g] not in (NO_TENANT, tenant):
            return "the GPU holds another tenant's MIG slices"
        if p.mig_start not in mig.starts_free(int(cluster.mig_layout[i, g]), prof):
            return f"{r.profile} cannot start at slice {p.mig_start} on that GPU"
    return None


def apply(cluster: Cluster, p: Placement) -> None:
    """Take what ``p`` places from the cluster's free capacity; raises PlacementConflict when it
    does not fit, and then changes nothing."""
    why = _conflict(cluster, p)
    if why is not None:
        raise PlacementConflict(why)
    _move(cluster, p, -1)
    cluster.applied[p] += 1


def release(cluster: Cluster, p: Placement) -> None:
    """Give back what ``p`` took; raises PlacementConflict when ``p`` is not applied."""
    if cluster.applied[p] <= 0:
        raise PlacementConflict(f"release of a placement not applied: {p}")
    cluster.applied[p] -= 1
    if not cluster.applied[p]:
        del cluster.applied[p]
    _move(cluster, p, +1)


def _move(cluster: Cluster, p: Placement, sign: int) -> None:
    """Free capacity moved by ``sign`` (-1 take, +1 give back) for what ``p`` places."""
    r = p.request
    rows = [cluster.index[n] for n in p.nodes]
    if isinstance(r, WholeNodes):
        for i in rows:
            taking = sign < 0
            cluster.cpu_free[i] = 0 if taking else cluster.cpu_total[i]
            cluster.memory_free[i] = 0 if taking else cluster.memory_total[i]
            cluster.gpu_free[i] = 0 if taking else cluster.gpu_full[i]
        return
    i = rows[0]
    cluster.cpu_free[i] += sign * r.cpu_milli
    cluster.memory_free[i] += sign * r.memory_mib
    if isinstance(r, Gpus):
        cluster.gpu_free[i, list(p.gpus)] += sign * MILLI
    elif isinstance(r, Share):
        g = p.gpus[0]
        cluster.gpu_free[i, g] += sign * r.milli
        full = cluster.gpu_free[i, g] == MILLI
        cluster.share_tenant[i, g] = NO_TENANT if full else cluster.tenant_id(r.tenant)
    elif isinstance(r, MigSlice):
        g, prof = p.gpus[0], mig.profile(r.profile)
        start = p.mig_start if p.mig_start is not None else 0  # _conflict refused None
        cluster.mig_layout[i, g] ^= prof.mask(start)
        cluster.gpu_free[i, g] += sign * mig.MILLI_PER_SLICE * prof.size
        empty = cluster.mig_layout[i, g] == 0
        cluster.mig_tenant[i, g] = NO_TENANT if empty else cluster.tenant_id(r.tenant)

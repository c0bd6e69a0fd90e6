"""The placement core: a cluster model, requests, placement policies and fragmentation measures,
as pure functions over numpy arrays (no I/O, no asyncio, nothing else of ours).

    cluster = Cluster([NodeSpec("n1", "H100", 8, 192_000, 2_097_152)])
    placed = best_fit(cluster, Gpus(tenant="t1", count=2))
    if placed is not None:
        apply(cluster, placed)

docs/scheduling.md describes the model, the MIG rules, each policy and the figures behind them.
"""

from __future__ import annotations

from scheduling.errors import InvalidCluster, InvalidRequest, PlacementConflict, SchedulingError, UnknownProfile
from scheduling.fgd_cost import node_fragmentation, placement_costs
from scheduling.fragmentation import fgd_fragmentation, free_gpus, free_nodes, largest_free_block, stranded_gpus
from scheduling.mig import PROFILES, Profile, best_start, is_valid_layout, starts_free
from scheduling.model import Cluster, NodeSpec
from scheduling.placement import Placement, apply, release
from scheduling.policies import POLICIES, Policy, best_fit, fgd, fgd_refined, first_fit, worst_fit
from scheduling.requests import GPU_COUNTS, CpuOnly, Gpus, MigSlice, Request, Share, WholeNodes, gpu_milli
from scheduling.workload import DEFAULT_MIX, TaskShape, WorkloadMix, blend, shape_of, typical, workload_mix

__all__ = [
    "DEFAULT_MIX",
    "GPU_COUNTS",
    "POLICIES",
    "PROFILES",
    "Cluster",
    "CpuOnly",
    "Gpus",
    "InvalidCluster",
    "InvalidRequest",
    "MigSlice",
    "NodeSpec",
    "Placement",
    "PlacementConflict",
    "Policy",
    "Profile",
    "Request",
    "SchedulingError",
    "Share",
    "TaskShape",
    "UnknownProfile",
    "WholeNodes",
    "WorkloadMix",
    "apply",
    "best_fit",
    "best_start",
    "blend",
    "fgd",
    "fgd_fragmentation",
    "fgd_refined",
    "first_fit",
    "free_gpus",
    "free_nodes",
    "gpu_milli",
    "is_valid_layout",
    "largest_free_block",
    "node_fragmentation",
    "placement_costs",
    "release",
    "shape_of",
    "starts_free",
    "stranded_gpus",
    "typical",
    "workload_mix",
    "worst_fit",
]

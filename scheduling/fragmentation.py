"""How fragmented a cluster is, each measure a function of the cluster as it stands."""

from __future__ import annotations

import numpy as np

from scheduling.fgd_cost import node_fragmentation
from scheduling.model import MILLI, Cluster
from scheduling.workload import WorkloadMix


def free_gpus(cluster: Cluster) -> int:
    """GPUs with nothing on them."""
    return int(cluster.whole_gpus_free().sum())


def free_nodes(cluster: Cluster) -> int:
    """Nodes with nothing on them."""
    return int(np.count_nonzero(cluster.idle()))


def largest_free_block(cluster: Cluster) -> int:
    """The most idle nodes in one fabric block: the largest job that can still run without
    crossing a block's uplinks."""
    return int(np.bincount(cluster.block[cluster.idle()], minlength=cluster.block_count).max(initial=0))


def stranded_gpus(cluster: Cluster, mix: WorkloadMix | None = None) -> float:
    """Free GPU capacity (in GPUs) on nodes where no task shape of the mix can run: free, but of
    no use to the work that arrives."""
    mix = mix or cluster.workload
    usable = np.zeros(len(cluster), dtype=np.bool_)
    free = np.where(cluster.mig_layout == 0, cluster.gpu_free, 0)
    for shape in mix.shapes:
        big_enough = np.count_nonzero(free >= shape.gpu_milli, axis=1) >= shape.gpus
        host = (cluster.cpu_free >= shape.cpu_milli) & (cluster.memory_free >= shape.memory_mib)
        usable |= cluster.accepting(shape.models) & big_enough & host
    return float(free[~usable].sum()) / MILLI


def fgd_fragmentation(cluster: Cluster, mix: WorkloadMix | None = None) -> float:
    """The cluster's expected fragmented GPU capacity for the mix (in GPUs), as FGD measures it:
    the sum over nodes of what each task shape, weighted by its frequency, could not use."""
    return float(node_fragmentation(cluster, mix or cluster.workload).sum()) / MILLI

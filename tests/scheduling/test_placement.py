"""Applying and releasing placements, and the conflicts apply refuses."""

from __future__ import annotations

import numpy as np
import pytest

from scheduling import (
    Cluster,
    CpuOnly,
    Gpus,
    InvalidCluster,
    MigSlice,
    Placement,
    PlacementConflict,
    Share,
    WholeNodes,
    apply,
    release,
)
from tests.scheduling.helpers import CPU, MEMORY, node


def _cluster() -> Cluster:
    return Cluster([node("n1", mig=True), node("n2", 4, model="A100")])


def _state(cluster: Cluster) -> list[list[int]]:
    return [
        a.tolist()
        for a in (
            cluster.cpu_free,
            cluster.memory_free,
            cluster.gpu_free,
            cluster.share_tenant,
            cluster.mig_layout,
            cluster.mig_tenant,
        )
    ]


def test_node_ids_are_unique() -> None:
    with pytest.raises(InvalidCluster, match="twice"):
        Cluster([node("n1"), node("n1")])


def test_gpus_take_whole_gpus_cpu_and_memory_and_give_them_back() -> None:
    cluster = _cluster()
    before = _state(cluster)
    placed = Placement(Gpus(tenant="t", count=2, cpu_milli=8000, memory_mib=1000), ("n1",), (3, 5))
    apply(cluster, placed)
    assert cluster.gpu_free[0].tolist() == [1000, 1000, 1000, 0, 1000, 0, 1000, 1000]
    assert (int(cluster.cpu_free[0]), int(cluster.memory_free[0])) == (CPU - 8000, MEMORY - 1000)
    release(cluster, placed)
    assert _state(cluster) == before


def test_shares_of_one_tenant_stack_on_a_gpu() -> None:
    cluster = _cluster()
    apply(cluster, Placement(Share(tenant="a", milli=300), ("n1",), (0,)))
    apply(cluster, Placement(Share(tenant="a", milli=600), ("n1",), (0,)))
    assert int(cluster.gpu_free[0, 0]) == 100


def test_a_gpu_never_holds_two_tenants_shares() -> None:
    cluster = _cluster()
    apply(cluster, Placement(Share(tenant="a", milli=300), ("n1",), (0,)))
    with pytest.raises(PlacementConflict, match="another tenant's share"):
        apply(cluster, Placement(Share(tenant="b", milli=300), ("n1",), (0,)))


def test_a_gpu_freed_of_shares_takes_another_tenant() -> None:
    cluster = _cluster()
    placed = Placement(Share(tenant="a", milli=300), ("n1",), (0,))
    apply(cluster, placed)
    release(cluster, placed)
    apply(cluster, Placement(Share(tenant="b", milli=300), ("n1",), (0,)))
    assert int(cluster.share_tenant[0, 0]) == cluster.tenants["b"]


def test_a_share_never_exceeds_what_the_gpu_has_left() -> None:
    cluster = _cluster()
    apply(cluster, Placement(Share(tenant="a", milli=700), ("n1",), (0,)))
    with pytest.raises(PlacementConflict, match="less free"):
        apply(cluster, Placement(Share(tenant="a", milli=301), ("n1",), (0,)))


def test_mig_slices_follow_the_placement_table() -> None:
    cluster = _cluster()
    apply(cluster, Placement(MigSlice(tenant="a", profile="3g.40gb"), ("n1",), (0,), mig_start=4))
    apply(cluster, Placement(MigSlice(tenant="a", profile="4g.40gb"), ("n1",), (0,), mig_start=0))
    assert int(cluster.mig_layout[0, 0]) == 0xFF
    assert int(cluster.gpu_free[0, 0]) == 0
    with pytest.raises(PlacementConflict, match="cannot start"):
        apply(cluster, Placement(MigSlice(tenant="a", profile="1g.10gb"), ("n1",), (0,), mig_start=6))


def test_a_mig_start_the_table_forbids_is_refused() -> None:
    cluster = _cluster()
    with pytest.raises(PlacementConflict, match="cannot start at slice 4"):
        apply(cluster, Placement(MigSlice(tenant="a", profile="4g.40gb"), ("n1",), (0,), mig_start=4))


def test_mig_slices_of_one_gpu_belong_to_one_tenant() -> None:
    cluster = _cluster()
    apply(cluster, Placement(MigSlice(tenant="a", profile="1g.10gb"), ("n1",), (2,), mig_start=0))
    with pytest.raises(PlacementConflict, match="another tenant's MIG"):
        apply(cluster, Placement(MigSlice(tenant="b", profile="1g.10gb"), ("n1",), (2,), mig_start=1))


def test_mig_needs_a_mig_capable_gpu_not_taken_otherwise() -> None:
    cluster = _cluster()
    with pytest.raises(PlacementConflict, match="takes no MIG"):
        apply(cluster, Placement(MigSlice(tenant="a", profile="1g.10gb"), ("n2",), (0,), mig_start=0))
    apply(cluster, Placement(Share(tenant="a", milli=100), ("n1",), (0,)))
    with pytest.raises(PlacementConflict, match="takes no MIG"):
        apply(cluster, Placement(MigSlice(tenant="a", profile="1g.10gb"), ("n1",), (0,), mig_start=0))
    apply(cluster, Placement(Gpus(tenant="a", count=1), ("n1",), (1,)))
    with pytest.raises(PlacementConflict, match="takes no MIG"):
        apply(cluster, Placement(MigSlice(tenant="a", profile="1g.10gb"), ("n1",), (1,), mig_start=0))


def test_a_share_never_lands_on_a_gpu_in_mig_mode() -> None:
    cluster = _cluster()
    apply(cluster, Placement(MigSlice(tenant="a", profile="1g.10gb"), ("n1",), (0,), mig_start=0))
    with pytest.raises(PlacementConflict, match="MIG mode"):
        apply(cluster, Placement(Share(tenant="a", milli=100), ("n1",), (0,)))


def test_whole_nodes_take_idle_nodes_only() -> None:
    cluster = _cluster()
    apply(cluster, Placement(CpuOnly(tenant="a", cpu_milli=1000), ("n2",)))
    with pytest.raises(PlacementConflict, match="idle"):
        apply(cluster, Placement(WholeNodes(tenant="b", count=1), ("n2",)))
    placed = Placement(WholeNodes(tenant="b", count=1), ("n1",))
    apply(cluster, placed)
    assert (int(cluster.cpu_free[0]), int(cluster.gpu_free[0].sum())) == (0, 0)


def test_cpu_and_memory_never_go_over_capacity() -> None:
    cluster = _cluster()
    with pytest.raises(PlacementConflict, match="CPU or memory"):
        apply(cluster, Placement(CpuOnly(tenant="a", memory_mib=MEMORY + 1), ("n1",)))


def test_a_refused_placement_changes_nothing() -> None:
    cluster = _cluster()
    before = _state(cluster)
    with pytest.raises(PlacementConflict, match="2 distinct GPU"):
        apply(cluster, Placement(Gpus(tenant="a", count=2), ("n1",), (1, 1)))
    assert _state(cluster) == before


def test_a_model_the_request_does_not_accept_is_refused() -> None:
    cluster = _cluster()
    with pytest.raises(PlacementConflict, match="does not accept"):
        apply(cluster, Placement(Gpus(tenant="a", count=1, models=("H100",)), ("n2",), (0,)))


def test_release_of_what_was_not_applied_is_refused() -> None:
    cluster = _cluster()
    placed = Placement(Gpus(tenant="a", count=1), ("n1",), (0,))
    with pytest.raises(PlacementConflict, match="not applied"):
        release(cluster, placed)
    apply(cluster, placed)
    release(cluster, placed)
    with pytest.raises(PlacementConflict, match="not applied"):
        release(cluster, placed)


def test_the_allocated_share_counts_mig_slices_as_eighths() -> None:
    cluster = Cluster([node("n1", 1, mig=True)])
    apply(cluster, Placement(MigSlice(tenant="a", profile="3g.40gb"), ("n1",), (0,), mig_start=4))
    assert cluster.allocated_gpu_share() == pytest.approx(0.5)
    assert np.array_equal(cluster.whole_gpus_free(), [0])


def test_an_extended_cluster_keeps_every_placement_and_adds_idle_nodes() -> None:
    """``extended`` is the cluster as if built with the new nodes and every placement applied
    again: the state arrays, the tenants and the placements releasable on it."""
    small = Cluster([node("n1", 4, mig=True)])
    share = Placement(Share(tenant="t1", milli=250, cpu_milli=1000), ("n1",), (0,))
    sliced = Placement(MigSlice(tenant="t2", profile="3g.40gb"), ("n1",), (1,), 4)
    for placement in (share, sliced):
        apply(small, placement)
    grown = small.extended([node("n2", 8, mig=True)])
    rebuilt = Cluster([node("n1", 4, mig=True), node("n2", 8, mig=True)])
    for placement in (share, sliced):
        apply(rebuilt, placement)
    assert _state(grown) == _state(rebuilt)
    assert grown.tenants == rebuilt.tenants
    assert small.gpu_free[0].tolist() == [750, 500, 1000, 1000], "the cluster it grew from is unchanged"
    release(grown, sliced)
    apply(grown, Placement(Gpus(tenant="t3", count=8), ("n2",), tuple(range(8))))
    assert grown.gpu_free[0].tolist() == [750, 1000, 1000, 1000, 0, 0, 0, 0]

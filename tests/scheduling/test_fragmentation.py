"""The fragmentation measures on states built by hand, and FGD's placement costs against the
measure itself."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling import (
    Cluster,
    CpuOnly,
    Gpus,
    Placement,
    Request,
    Share,
    TaskShape,
    WorkloadMix,
    apply,
    blend,
    fgd_fragmentation,
    first_fit,
    free_gpus,
    free_nodes,
    largest_free_block,
    node_fragmentation,
    placement_costs,
    release,
    stranded_gpus,
    typical,
    workload_mix,
)
from scheduling.fit import feasible
from tests.scheduling.helpers import CPU, node

ONE_GPU = WorkloadMix((TaskShape(1000, 1000, 1),), (1.0,))


def _state() -> Cluster:
    """Block b1: n1 with a 300 share on GPU 0, n2 with one GPU taken; block b2: n3 with all its
    CPU taken and every GPU free; n4 idle in b2."""
    cluster = Cluster(
        [node("n1", block="b1"), node("n2", block="b1"), node("n3", block="b2"), node("n4", block="b2")], ONE_GPU
    )
    apply(cluster, Placement(Share(tenant="t", milli=300), ("n1",), (0,)))
    apply(cluster, Placement(Gpus(tenant="t", count=1), ("n2",), (0,)))
    apply(cluster, Placement(CpuOnly(tenant="t", cpu_milli=CPU), ("n3",)))
    return cluster


def test_free_gpus_count_gpus_with_nothing_on_them() -> None:
    assert free_gpus(_state()) == 7 + 7 + 8 + 8


def test_free_nodes_count_nodes_with_nothing_on_them() -> None:
    assert free_nodes(_state()) == 1


def test_the_largest_free_block() -> None:
    cluster = _state()
    assert largest_free_block(cluster) == 1
    apply(cluster, Placement(CpuOnly(tenant="t", cpu_milli=1), ("n4",)))
    assert largest_free_block(cluster) == 0


def test_stranded_gpus_are_free_where_no_task_can_run() -> None:
    assert stranded_gpus(_state()) == 8.0  # n3: GPUs free, no CPU left


def test_fgd_fragmentation_counts_what_each_shape_cannot_use() -> None:
    # n1: the 700 left on GPU 0 is too little for a whole GPU; n3: no CPU, all 8 GPUs.
    assert fgd_fragmentation(_state()) == pytest.approx(0.7 + 8.0)
    assert node_fragmentation(_state(), ONE_GPU).tolist() == pytest.approx([700.0, 0.0, 8000.0, 0.0])


def test_typical_keeps_the_frequent_shapes_ten_at_a_time() -> None:
    shapes = [TaskShape(0, 10 * i, 1) for i in range(1, 13) for _ in range(13 - i)]
    kept = typical(workload_mix(shapes))
    assert [s.gpu_milli for s in kept.shapes] == [10 * i for i in range(1, 11)]
    assert sum(kept.weights) == pytest.approx(1.0)


MIX = WorkloadMix(
    (TaskShape(2000, 1000, 1), TaskShape(1000, 500, 1), TaskShape(4000, 1000, 2), TaskShape(0, 250, 1, (), 4096)),
    (0.4, 0.3, 0.2, 0.1),
)
REQUESTS = st.one_of(
    st.builds(lambda n, c: Gpus(tenant="t", count=n, cpu_milli=c), st.sampled_from([1, 2, 4]), st.integers(0, 9000)),
    st.builds(lambda m, c: Share(tenant="t", milli=m, cpu_milli=c), st.integers(1, 999), st.integers(0, 9000)),
    st.builds(lambda c: CpuOnly(tenant="t", cpu_milli=c), st.integers(0, 20_000)),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(REQUESTS, max_size=12), REQUESTS)
def test_a_placement_cost_is_the_rise_in_the_measure(history: list[Request], request: Request) -> None:
    cluster = Cluster([node("n1", 4, cpu=16_000), node("n2", 2, cpu=16_000), node("n3", 8, cpu=16_000)], MIX)
    for earlier in history:
        placed = first_fit(cluster, earlier)
        if placed is not None:
            apply(cluster, placed)
    rows = np.flatnonzero(feasible(cluster, request))
    costs = placement_costs(cluster, request, rows, MIX)
    for k, row in enumerate(rows):
        gpus = range(int(cluster.gpu_count[row])) if isinstance(request, Share) else [None]
        for g in gpus:
            cost = costs[k, g] if g is not None else costs[k]
            if not np.isfinite(cost):
                continue
            placed = _placement(cluster, request, int(row), g)
            before = node_fragmentation(cluster, MIX)[row]
            apply(cluster, placed)
            after = node_fragmentation(cluster, MIX)[row]
            release(cluster, placed)
            assert cost == pytest.approx(after - before)


def _placement(cluster: Cluster, request: Request, row: int, gpu: int | None) -> Placement:
    node_id = cluster.nodes[row].node_id
    if isinstance(request, Gpus):
        free = np.flatnonzero(cluster.gpu_free[row] == 1000)[: request.count]
        return Placement(request, (node_id,), tuple(int(g) for g in free))
    return Placement(request, (node_id,), () if gpu is None else (gpu,))


def test_a_blend_weighs_each_mix_by_its_share() -> None:
    a, b, c = TaskShape(0, 100, 1), TaskShape(0, 200, 1), TaskShape(0, 300, 1)
    mixed = blend(WorkloadMix((a, b), (0.5, 0.5)), WorkloadMix((b, c), (0.25, 0.75)), 0.2)
    assert dict(zip(mixed.shapes, mixed.weights, strict=True)) == pytest.approx({a: 0.1, b: 0.3, c: 0.6})

"""Each policy's exact choice on small clusters built by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling import (
    POLICIES,
    Cluster,
    CpuOnly,
    Gpus,
    MigSlice,
    NodeSpec,
    Placement,
    Policy,
    Share,
    TaskShape,
    WholeNodes,
    WorkloadMix,
    apply,
    best_fit,
    fgd,
    fgd_refined,
    first_fit,
    worst_fit,
)
from tests.scheduling.helpers import node


def _where(placed: Placement | None) -> tuple[tuple[str, ...], tuple[int, ...], int | None]:
    assert placed is not None
    return placed.nodes, placed.gpus, placed.mig_start


def _three_nodes() -> Cluster:
    """n1 idle, n2 with 6 of its 8 GPUs taken, n3 idle: in fabric order n1, n2, n3."""
    cluster = Cluster([node("n1", rack="r1"), node("n2", rack="r2"), node("n3", rack="r3")])
    apply(cluster, Placement(Gpus(tenant="x", count=4), ("n2",), (0, 1, 2, 3)))
    apply(cluster, Placement(Gpus(tenant="x", count=2), ("n2",), (4, 5)))
    return cluster


@pytest.mark.parametrize(
    ("policy", "expected"),
    [(first_fit, ("n1",)), (best_fit, ("n2",)), (worst_fit, ("n1",))],
)
def test_two_gpus_go_first_snug_or_spread(policy: Policy, expected: tuple[str, ...]) -> None:
    assert _where(policy(_three_nodes(), Gpus(tenant="t", count=2)))[0] == expected


def test_whole_gpus_are_the_lowest_free_indices() -> None:
    assert _where(best_fit(_three_nodes(), Gpus(tenant="t", count=2))) == (("n2",), (6, 7), None)


def test_eight_gpus_need_a_node_with_eight_free() -> None:
    cluster = _three_nodes()
    assert _where(best_fit(cluster, Gpus(tenant="t", count=8)))[0] == ("n1",)
    apply(cluster, Placement(Gpus(tenant="x", count=1), ("n1",), (0,)))
    apply(cluster, Placement(Gpus(tenant="x", count=1), ("n3",), (7,)))
    assert best_fit(cluster, Gpus(tenant="t", count=8)) is None


def _shared_node() -> Cluster:
    """One node: GPU 0 has 700 free, GPU 1 400, the rest are idle; all shares tenant a's."""
    cluster = Cluster([node("n1", 4)])
    apply(cluster, Placement(Share(tenant="a", milli=300), ("n1",), (0,)))
    apply(cluster, Placement(Share(tenant="a", milli=600), ("n1",), (1,)))
    return cluster


@pytest.mark.parametrize(("policy", "gpu"), [(first_fit, 0), (best_fit, 1), (worst_fit, 2)])
def test_a_share_picks_the_first_the_tightest_or_the_loosest_gpu(policy: Policy, gpu: int) -> None:
    assert _where(policy(_shared_node(), Share(tenant="a", milli=300)))[1] == (gpu,)


def test_a_share_skips_gpus_holding_another_tenants_shares() -> None:
    assert _where(best_fit(_shared_node(), Share(tenant="b", milli=300)))[1] == (2,)


def test_a_share_too_big_for_every_gpu_finds_nothing() -> None:
    cluster = Cluster([node("n1", 1)])
    apply(cluster, Placement(Share(tenant="a", milli=500), ("n1",), (0,)))
    assert first_fit(cluster, Share(tenant="a", milli=501)) is None


def test_cpu_and_memory_rule_nodes_out() -> None:
    cluster = Cluster([node("n1", cpu=4000, rack="r1"), node("n2", memory=1000, rack="r2"), node("n3", rack="r3")])
    request = Gpus(tenant="t", count=1, cpu_milli=8000, memory_mib=2000)
    assert _where(first_fit(cluster, request))[0] == ("n3",)


def test_models_rule_nodes_out() -> None:
    cluster = Cluster([node("n1", model="A100", rack="r1"), node("n2", model="H100", rack="r2")])
    assert _where(first_fit(cluster, Gpus(tenant="t", count=1, models=("H100",))))[0] == ("n2",)


def test_cpu_only_requests_take_no_gpu() -> None:
    assert _where(first_fit(_three_nodes(), CpuOnly(tenant="t", cpu_milli=1000))) == (("n1",), (), None)


def _mig_node() -> Cluster:
    return Cluster([node("n1", 2, mig=True, rack="r1"), node("n2", 2, rack="r2")])


def test_first_fit_starts_a_mig_slice_at_the_first_free_start() -> None:
    assert _where(first_fit(_mig_node(), MigSlice(tenant="t", profile="3g.40gb"))) == (("n1",), (0,), 0)


def test_best_fit_starts_a_3g_where_a_4g_still_fits_beside_it() -> None:
    cluster = _mig_node()
    placed = best_fit(cluster, MigSlice(tenant="t", profile="3g.40gb"))
    assert _where(placed) == (("n1",), (0,), 4)
    assert placed is not None
    apply(cluster, placed)
    assert _where(best_fit(cluster, MigSlice(tenant="t", profile="4g.40gb"))) == (("n1",), (0,), 0)


def test_mig_slices_pack_onto_the_tenants_gpu_in_mig_mode() -> None:
    cluster = _mig_node()
    apply(cluster, Placement(MigSlice(tenant="t", profile="1g.10gb"), ("n1",), (1,), mig_start=6))
    assert _where(best_fit(cluster, MigSlice(tenant="t", profile="2g.20gb")))[1] == (1,)
    assert _where(best_fit(cluster, MigSlice(tenant="u", profile="2g.20gb")))[1] == (0,)


def test_a_mig_slice_skips_a_gpu_taken_whole() -> None:
    cluster = _mig_node()
    apply(cluster, Placement(Gpus(tenant="t", count=1), ("n1",), (0,)))
    assert _where(first_fit(cluster, MigSlice(tenant="t", profile="1g.10gb")))[:2] == (("n1",), (1,))


def test_a_7g_80gb_needs_an_empty_mig_gpu() -> None:
    cluster = Cluster([node("n1", 1, mig=True)])
    apply(cluster, Placement(MigSlice(tenant="t", profile="1g.10gb"), ("n1",), (0,), mig_start=6))
    assert best_fit(cluster, MigSlice(tenant="t", profile="7g.80gb")) is None


SHARE_500 = WorkloadMix((TaskShape(0, 500, 1),), (1.0,))


def _fgd_cluster() -> Cluster:
    """A: 2 GPUs, GPU 0 with 600 free; B: 1 idle GPU. The workload: half-GPU shares."""
    cluster = Cluster([node("a", 2, rack="r1"), node("b", 1, rack="r2")], SHARE_500)
    apply(cluster, Placement(Share(tenant="t", milli=400), ("a",), (0,)))
    return cluster


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (first_fit, (("a",), (0,), None)),  # 100 left on GPU 0: a fragment for the next 500
        (best_fit, (("b",), (0,), None)),  # the node left with the least
        (fgd, (("a",), (1,), None)),  # 600 and 500 left: both serve the next 500
    ],
)
def test_fgd_leaves_no_fragment_where_others_do(policy: Policy, expected: tuple[object, ...]) -> None:
    assert _where(policy(_fgd_cluster(), Share(tenant="t", milli=500))) == expected


def _rare_pairs() -> WorkloadMix:
    """Ten share sizes, each 9.9%, and a rare two-GPU task (1%) the typical tasks leave out."""
    shapes = [TaskShape(0, 100 * i, 1) for i in range(1, 11)] + [TaskShape(0, 1000, 2)]
    return WorkloadMix(tuple(shapes), (0.099,) * 10 + (0.01,))


def _pairs_cluster() -> Cluster:
    """a: 2 idle GPUs; b: 2 GPUs, one taken."""
    cluster = Cluster([node("a", 2, rack="r1"), node("b", 2, rack="r2")], _rare_pairs())
    apply(cluster, Placement(Gpus(tenant="t", count=1), ("b",), (0,)))
    return cluster


def test_fgd_leaves_its_ties_to_fabric_order() -> None:
    # Either node serves every typical share afterwards: a tie, settled by fabric order.
    assert _where(fgd(_pairs_cluster(), Gpus(tenant="t", count=1)))[0] == ("a",)


def test_fgd_refined_settles_ties_with_the_whole_workload() -> None:
    # Taking a's GPU would leave no node for the rare two-GPU task.
    assert _where(fgd_refined(_pairs_cluster(), Gpus(tenant="t", count=1)))[0] == ("b",)


def test_fgd_refined_then_prefers_the_node_with_the_least_gpu_left() -> None:
    cluster = Cluster([node("a", 4, rack="r1"), node("b", 4, rack="r2")], SHARE_500)
    apply(cluster, Placement(Gpus(tenant="t", count=2), ("b",), (0, 1)))
    # A whole GPU from either node leaves both able to serve 500: a tie at both levels.
    assert _where(fgd(cluster, Gpus(tenant="t", count=1)))[0] == ("a",)
    assert _where(fgd_refined(cluster, Gpus(tenant="t", count=1)))[0] == ("b",)


def _blocks() -> Cluster:
    """Block b1: 3 idle nodes; block b2: 2 idle nodes; in fabric order b1's first."""
    return Cluster(
        [node(f"p{i}", rack="r1", block="b1") for i in range(3)]
        + [node(f"q{i}", rack="r2", block="b2") for i in range(2)]
    )


@pytest.mark.parametrize(
    ("policy", "count", "expected"),
    [
        (first_fit, 2, ("p0", "p1")),
        (best_fit, 2, ("q0", "q1")),  # the fullest block that holds two
        (worst_fit, 2, ("p0", "p1")),  # the emptiest block
        (best_fit, 3, ("p0", "p1", "p2")),
        (best_fit, 4, ("p0", "p1", "p2", "q0")),  # no block holds four: fabric order
        (fgd, 2, ("q0", "q1")),
    ],
)
def test_whole_nodes_by_block(policy: Policy, count: int, expected: tuple[str, ...]) -> None:
    assert _where(policy(_blocks(), WholeNodes(tenant="t", count=count)))[0] == expected


@pytest.mark.parametrize(
    ("policy", "count", "expected"),
    [
        (first_fit, 2, ("p0", "p1")),  # the first block in fabric order that holds two
        (first_fit, 3, ("p0", "p1", "p2")),
        (best_fit, 2, ("q0", "q1")),
        (worst_fit, 2, ("p0", "p1")),
        (fgd, 2, ("q0", "q1")),
        (fgd_refined, 2, ("q0", "q1")),
    ],
)
def test_same_block_places_inside_one_block(policy: Policy, count: int, expected: tuple[str, ...]) -> None:
    assert _where(policy(_blocks(), WholeNodes(tenant="t", count=count, same_block=True)))[0] == expected


@pytest.mark.parametrize("policy", [first_fit, best_fit, worst_fit, fgd, fgd_refined])
def test_same_block_is_refused_on_fragments_however_many_are_free(policy: Policy) -> None:
    """Five idle nodes, three and two by block: four fit by count, not inside one block."""
    assert policy(_blocks(), WholeNodes(tenant="t", count=4, same_block=True)) is None


def test_whole_nodes_skip_busy_nodes_and_other_models() -> None:
    cluster = Cluster([node("n1", rack="r1"), node("n2", rack="r2", model="A100"), node("n3", rack="r3")])
    apply(cluster, Placement(CpuOnly(tenant="x", cpu_milli=1), ("n1",)))
    assert _where(first_fit(cluster, WholeNodes(tenant="t", count=1, models=("H100",))))[0] == ("n3",)
    assert first_fit(cluster, WholeNodes(tenant="t", count=2, models=("H100",))) is None


def test_whole_nodes_are_all_of_the_first_model_that_has_enough() -> None:
    cluster = Cluster([node("n1", model="A100", rack="r1"), node("n2", rack="r2"), node("n3", rack="r3")])
    request = WholeNodes(tenant="t", count=2, models=("A100", "H100"))
    assert _where(first_fit(cluster, request))[0] == ("n2", "n3")


FABRIC = st.tuples(st.sampled_from("ab"), st.sampled_from("xyz"), st.sampled_from("uv"))


@given(st.lists(FABRIC, min_size=1, max_size=12), st.integers(1, 12))
def test_whole_node_first_fit_is_the_servers_fabric_order(places: list[tuple[str, str, str]], count: int) -> None:
    """The server's policy: the first ``count`` (zone, rack, leaf switch, node id) in order."""
    specs = [
        NodeSpec(f"n{i:02d}", "H100", 8, 1000, 1000, zone, "", rack, leaf)
        for i, (zone, rack, leaf) in enumerate(places)
    ]
    placed = first_fit(Cluster(specs), WholeNodes(tenant="t", count=count))
    expected = sorted((s.zone, s.rack, s.leaf_switch, s.node_id) for s in specs)[:count]
    if count > len(specs):
        assert placed is None
    else:
        assert placed is not None
        assert list(placed.nodes) == [key[3] for key in expected]


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_finds_nothing_on_a_full_cluster(name: str) -> None:
    cluster = Cluster([node("n1", 1)])
    apply(cluster, Placement(Gpus(tenant="t", count=1), ("n1",), (0,)))
    assert POLICIES[name](cluster, Share(tenant="t", milli=1)) is None

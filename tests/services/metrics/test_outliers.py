"""Fleet-median outliers: peers are one model under comparable load, the median and the median
absolute deviation resist the outliers themselves, and a group too small is not judged."""

from __future__ import annotations

import pytest

from services.metrics.outliers import MIN_GROUP, GpuFigure, below_median


def fleet(values: list[float], *, model: str = "H100", busy: bool = True, node: str = "n") -> list[GpuFigure]:
    return [GpuFigure(f"{node}-{i // 8:02d}", i % 8, model, value, busy) for i, value in enumerate(values)]


def test_a_gpu_far_below_its_peers_is_flagged_with_how_far() -> None:
    values = [1980.0, 1975.0, 1990.0, 1985.0, 1970.0, 1995.0, 1980.0, 1985.0, 1000.0]
    groups, outliers = below_median(fleet(values), k=3)
    [group] = groups
    assert (group.gpu_model, group.busy, group.gpus, group.median) == ("H100", True, 9, 1980.0)
    # MAD 5 -> spread 7.4; the floor is 1% of the median, 19.8.
    assert group.spread == pytest.approx(19.8)
    [slow] = outliers
    assert (slow.figure.node_id, slow.figure.gpu_index) == ("n-01", 0)
    assert slow.deviations == pytest.approx((1980 - 1000) / 19.8)


def test_the_median_absolute_deviation_sets_the_spread_when_figures_wander() -> None:
    values = [300.0, 320.0, 340.0, 360.0, 380.0, 400.0, 420.0, 440.0, 200.0]
    groups, outliers = below_median(fleet(values), k=3)
    # median 360; deviations 60,40,20,0,20,40,60,80,160 -> MAD 40 -> spread 59.3
    assert groups[0].spread == pytest.approx(1.4826 * 40)
    assert outliers == []  # 200 is 2.7 spreads below: within k = 3
    _, looser = below_median(fleet(values), k=2.5)
    assert [o.figure.value for o in looser] == [200.0]


def test_peers_are_the_same_model_under_the_same_load() -> None:
    """An idle GPU's clock is far below a busy one's by design: it is never compared with them."""
    busy = fleet([1980.0] * 8, busy=True, node="b")
    idle = fleet([345.0] * 8, busy=False, node="i")
    other = fleet([1410.0] * 7 + [700.0], model="A100", node="a")
    groups, outliers = below_median(busy + idle + other, k=3)
    assert [(g.gpu_model, g.busy, g.median) for g in groups] == [
        ("A100", True, 1410.0),
        ("H100", False, 345.0),
        ("H100", True, 1980.0),
    ]
    assert [(o.figure.gpu_model, o.figure.value) for o in outliers] == [("A100", 700.0)]


def test_only_figures_below_count_and_the_most_deviant_come_first() -> None:
    values = [100.0] * 10 + [200.0, 90.0, 50.0]
    _, outliers = below_median(fleet(values), k=3)
    assert [o.figure.value for o in outliers] == [50.0, 90.0]


def test_a_group_smaller_than_the_minimum_is_not_judged() -> None:
    groups, outliers = below_median(fleet([100.0] * (MIN_GROUP - 2) + [1.0]), k=3)
    assert (groups, outliers) == ([], [])


def test_all_zero_figures_flag_nothing() -> None:
    groups, outliers = below_median(fleet([0.0] * 10), k=3)
    assert [g.spread for g in groups] == [0.0]
    assert outliers == []


@pytest.mark.parametrize("k", [0.0, -1.0])
def test_k_must_be_positive(k: float) -> None:
    with pytest.raises(ValueError, match="k must be > 0"):
        below_median([], k=k)

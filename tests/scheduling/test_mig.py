"""NVIDIA's H100 80GB MIG placement rules, as the profile table and layouts encode them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling import PROFILES, UnknownProfile, best_start, is_valid_layout, starts_free
from scheduling.mig import COMPUTE_SLICES, FITS, LAYOUTS, profile

ONE = PROFILES["1g.10gb"]


def _layout(*instances: tuple[str, int]) -> int:
    used = 0
    for name, start in instances:
        used |= PROFILES[name].mask(start)
    return used


def test_the_table_is_nvidias_for_the_h100_80gb() -> None:
    table = {name: (p.compute, p.size, p.starts, p.max_instances) for name, p in PROFILES.items()}
    assert table == {
        "1g.10gb": (1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
        "1g.20gb": (1, 2, (0, 2, 4, 6), 4),
        "2g.20gb": (2, 2, (0, 2, 4), 3),
        "3g.40gb": (3, 4, (0, 4), 2),
        "4g.40gb": (4, 4, (0,), 1),
        "7g.80gb": (7, 8, (0,), 1),
    }


@pytest.mark.parametrize(("start", "left"), [(0, 3), (4, 4)])
def test_one_3g_40gb_leaves_room_for_fewer_1g_10gb(start: int, left: int) -> None:
    # At slot 0 it takes slices 0-3 and 1g.10gb never starts at slice 7: 4, 5, 6 remain.
    assert len(starts_free(_layout(("3g.40gb", start)), ONE)) == left


def test_4g_40gb_starts_only_at_slice_0() -> None:
    assert starts_free(0, PROFILES["4g.40gb"]) == [0]
    assert starts_free(_layout(("1g.10gb", 0)), PROFILES["4g.40gb"]) == []
    assert starts_free(_layout(("3g.40gb", 4)), PROFILES["4g.40gb"]) == [0]


@pytest.mark.parametrize("taken", ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb"])
def test_7g_80gb_needs_an_empty_gpu(taken: str) -> None:
    layout = _layout((taken, PROFILES[taken].starts[-1]))
    assert starts_free(layout, PROFILES["7g.80gb"]) == []


def test_7g_80gb_fits_an_empty_gpu_and_then_nothing_else_does() -> None:
    assert starts_free(0, PROFILES["7g.80gb"]) == [0]
    full = _layout(("7g.80gb", 0))
    assert [name for name, p in PROFILES.items() if starts_free(full, p)] == []


def test_a_4g_and_a_3g_fill_the_gpu() -> None:
    assert is_valid_layout([(PROFILES["4g.40gb"], 0), (PROFILES["3g.40gb"], 4)])


@pytest.mark.parametrize(
    "instances",
    [
        [("4g.40gb", 4)],  # not an allowed start
        [("1g.10gb", 7)],  # slice 7 takes no 1g.10gb
        [("2g.20gb", 0), ("1g.10gb", 1)],  # overlap
        [("3g.40gb", 0), ("4g.40gb", 0)],  # overlap
        [("2g.20gb", 6)],  # not an allowed start
    ],
)
def test_layouts_nvidia_forbids_are_refused(instances: list[tuple[str, int]]) -> None:
    assert not is_valid_layout([(PROFILES[n], s) for n, s in instances])


def test_best_start_keeps_the_most_room() -> None:
    assert best_start(0, PROFILES["3g.40gb"]) == 4  # slices 0-3 keep a 4g.40gb possible
    assert best_start(0, ONE) == 6  # the slice no larger profile can start at alone
    assert best_start(_layout(("7g.80gb", 0)), ONE) is None


def test_an_unknown_profile_is_its_own_error() -> None:
    with pytest.raises(UnknownProfile, match=r"5g\.50gb"):
        profile("5g.50gb")


@given(st.integers(0, LAYOUTS - 1))
def test_the_fits_table_agrees_with_the_starts(layout: int) -> None:
    assert {name: bool(FITS[name][layout]) for name in PROFILES} == {
        name: bool(starts_free(layout, p)) for name, p in PROFILES.items()
    }


@given(st.lists(st.sampled_from(sorted(PROFILES)), max_size=10))
def test_placing_at_the_best_start_never_breaks_the_rules(names: list[str]) -> None:
    layout, instances = 0, []
    for name in names:
        start = best_start(layout, PROFILES[name])
        if start is not None:
            instances.append((PROFILES[name], start))
            layout |= PROFILES[name].mask(start)
    assert is_valid_layout(instances)
    assert sum(p.compute for p, _ in instances) <= COMPUTE_SLICES

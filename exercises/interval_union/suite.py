"""The interval-union suite: every function against a brute-force oracle that counts each time
unit, on random intervals from hypothesis, and the traps as hand-written cases."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from exercises.harness import Mistake, needs, under_test

impl = under_test()
HORIZON = 60


def Interval(start: int, end: int) -> Any:
    """The implementation's own ``Interval``."""
    return impl.Interval(start, end)


intervals = st.lists(st.builds(Interval, st.integers(0, HORIZON), st.integers(0, HORIZON)), max_size=12)


def covered(items: list[Any]) -> set[int]:
    """Every unit t with start <= t < end for some interval: the definition, not an algorithm."""
    return {t for i in items for t in range(i.start, i.end)}


def as_units(items: list[Any]) -> set[int]:
    units: set[int] = set()
    for i in items:
        assert i.end > i.start, f"a result holds the empty interval {i}"
        units |= set(range(i.start, i.end))
    return units


def disjoint_sorted(items: list[Any]) -> bool:
    return all(a.end < b.start for a, b in itertools.pairwise(items))


def _length(items: list[Any]) -> int:
    return sum(i.end - i.start for i in items)


I = Interval  # noqa: E741  (short: the probes read best)

MISTAKES = [
    Mistake(
        "double_counts_overlaps",
        "overlapping intervals are counted twice: merge an interval into the last piece whenever it starts"
        " before that piece ends, and extend the piece to the later of the two ends",
        ("union", "total"),
        lambda impl: impl.total([I(0, 10), I(5, 15), I(2, 4)]) != 15,
    ),
    Mistake(
        "touching_not_merged",
        "[0, 10) and [10, 20) touch: union merges when the next start is <= the last end, not only <",
        ("union",),
        lambda impl: len(impl.union([I(0, 10), I(10, 20)])) != 1,
    ),
    Mistake(
        "intersect_skips_union",
        "an outage reported twice is credited twice: union each side before the two-pointer scan",
        ("intersect",),
        lambda impl: _length(impl.intersect([I(0, 100)], [I(10, 30), I(10, 30), I(20, 40)])) != 30,
    ),
    Mistake(
        "subtract_skips_union",
        "overlapping cuts are removed one at a time, leaving pieces behind: union the cuts (and the base) first",
        ("subtract",),
        lambda impl: _length(impl.subtract([I(0, 100), I(50, 60)], [I(10, 30), I(20, 40)])) != 70,
    ),
    Mistake(
        "clip_keeps_outside",
        "an interval entirely outside the period is dropped, not kept as an empty or reversed piece",
        ("clip",),
        lambda impl: impl.clip([I(20, 30), I(0, 5)], I(10, 20)) != [],
    ),
    Mistake(
        "counts_reports_not_gpus",
        "a GPU reported twice at once is one GPU: union each GPU's intervals before the sweep",
        ("excess_over",),
        lambda impl: impl.excess_over({"g0": [I(0, 10), I(0, 10)]}, 1) != 0,
    ),
    Mistake(
        "touching_counted_concurrent",
        "one GPU stopping as another starts is not two at once: weigh each span before applying the"
        " changes at its end (or apply ends before starts at one instant)",
        ("excess_over",),
        lambda impl: impl.excess_over({"a": [I(0, 10)], "b": [I(10, 20)], "c": [I(10, 15)]}, 2) != 0,
    ),
]


@needs("union")
@given(intervals)
def test_union_covers_exactly_what_the_inputs_cover(items: list[Any]) -> None:
    """union() covers the same units as its inputs, in disjoint, sorted, non-touching pieces."""
    merged = impl.union(items)
    assert as_units(merged) == covered(items)
    assert disjoint_sorted(merged), f"pieces overlap, touch or are out of order: {merged}"


@needs("union")
def test_union_merges_touching_intervals() -> None:
    """union() of [0, 10) and [10, 20) is the one piece [0, 20)."""
    merged = impl.union([I(10, 20), I(0, 10)])
    assert [(i.start, i.end) for i in merged] == [(0, 20)]


@needs("total")
@given(intervals)
def test_total_counts_each_unit_once(items: list[Any]) -> None:
    """total() is the number of units any input covers."""
    assert impl.total(items) == len(covered(items))


@needs("overlap")
@given(intervals)
def test_overlap_is_what_naive_summing_overcounts(items: list[Any]) -> None:
    """overlap() is the sum over units of (times covered - 1)."""
    counts = Counter(t for i in items for t in range(i.start, i.end))
    assert impl.overlap(items) == sum(c - 1 for c in counts.values())


@needs("intersect")
@given(intervals, intervals)
def test_intersect_is_the_shared_time(base: list[Any], outages: list[Any]) -> None:
    """intersect() covers exactly the units both sides cover, in disjoint sorted pieces."""
    shared = impl.intersect(base, outages)
    assert as_units(shared) == covered(base) & covered(outages)
    assert disjoint_sorted(shared), f"pieces overlap, touch or are out of order: {shared}"


@needs("intersect")
def test_a_duplicated_outage_is_credited_once() -> None:
    """intersect() of an hour of usage with one outage reported twice credits the outage once."""
    shared = impl.intersect([I(0, 100)], [I(10, 30), I(10, 30), I(20, 40)])
    assert _length(shared) == 30


@needs("subtract")
@given(intervals, intervals)
def test_subtract_is_the_base_without_the_cuts(base: list[Any], cuts: list[Any]) -> None:
    """subtract() covers exactly the units the base covers and the cuts do not."""
    remaining = impl.subtract(base, cuts)
    assert as_units(remaining) == covered(base) - covered(cuts)
    assert disjoint_sorted(remaining), f"pieces overlap, touch or are out of order: {remaining}"


@needs("clip")
@given(intervals, st.integers(0, HORIZON), st.integers(0, HORIZON))
def test_clip_keeps_only_the_period(items: list[Any], start: int, end: int) -> None:
    """clip() keeps exactly the units inside [start, end), with no empty piece."""
    clipped = impl.clip(items, I(start, end))
    assert as_units(clipped) == covered(items) & set(range(start, end))


@needs("excess_over")
@given(st.dictionaries(st.sampled_from(["g0", "g1", "g2", "g3"]), intervals, max_size=4), st.integers(0, 4))
def test_excess_over_counts_distinct_gpus_above_the_commitment(by_gpu: dict[str, list[Any]], reserved: int) -> None:
    """excess_over() is the sum over units of max(0, distinct GPUs in use - reserved)."""
    in_use = Counter(t for items in by_gpu.values() for t in covered(items))
    assert impl.excess_over(by_gpu, reserved) == sum(max(0, n - reserved) for n in in_use.values())


@needs("excess_over")
def test_touching_intervals_are_not_concurrent() -> None:
    """excess_over() of [0, 10) on one GPU and [10, 20) on another, over 1 reserved, is 0."""
    assert impl.excess_over({"gpu-a": [I(0, 10)], "gpu-b": [I(10, 20)]}, 1) == 0

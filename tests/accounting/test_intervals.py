"""The interval algebra against a brute-force oracle that counts every time unit.

The interview exercise on the same functions (``gpucloud exercises check interval-union``) has
a suite of its own in exercises/interval_union/, which runs against a candidate's file too.
"""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from accounting.intervals import Interval, clip, excess_over, intersect, overlap, subtract, total, union

HORIZON = 60
intervals = st.lists(
    st.builds(Interval, st.integers(0, HORIZON), st.integers(0, HORIZON)),
    max_size=12,
)


def covered(items: list[Interval]) -> set[int]:
    """Every unit t with start <= t < end for some interval: the definition, not an algorithm."""
    return {t for i in items for t in range(i.start, i.end)}


def as_units(items: list[Interval]) -> set[int]:
    units: set[int] = set()
    for i in items:
        assert i.end > i.start, "results never hold empty intervals"
        units |= set(range(i.start, i.end))
    return units


def is_disjoint_sorted(items: list[Interval]) -> bool:
    return all(a.end < b.start for a, b in itertools.pairwise(items))


@given(intervals)
def test_union_covers_exactly_what_the_inputs_cover(items: list[Interval]) -> None:
    """union() covers the same units as its inputs, with disjoint, sorted, non-touching pieces."""
    merged = union(items)
    assert as_units(merged) == covered(items)
    assert is_disjoint_sorted(merged)
    assert total(items) == len(covered(items))


@given(intervals)
def test_overlap_is_what_naive_summing_overcounts(items: list[Interval]) -> None:
    """overlap() equals sum over units of (times covered - 1)."""
    counts = Counter(t for i in items for t in range(i.start, i.end))
    assert overlap(items) == sum(c - 1 for c in counts.values())


@given(intervals, intervals)
def test_intersect_and_subtract_partition_the_base(base: list[Interval], outages: list[Interval]) -> None:
    """intersect() is the shared time, subtract() the rest: together exactly the base's time."""
    shared, remaining = intersect(base, outages), subtract(base, outages)
    assert as_units(shared) == covered(base) & covered(outages)
    assert as_units(remaining) == covered(base) - covered(outages)
    assert is_disjoint_sorted(shared)
    assert is_disjoint_sorted(remaining)


def test_duplicate_outage_is_credited_once() -> None:
    """The intersection trap: one outage reported twice does not double the credit."""
    usage = [Interval(0, 100)]
    outages = [Interval(10, 30), Interval(10, 30), Interval(20, 40)]
    assert sum(i.length for i in intersect(usage, outages)) == 30
    assert total(subtract(usage, outages)) == 70


@given(intervals, st.integers(0, HORIZON), st.integers(0, HORIZON))
def test_clip_keeps_only_the_period(items: list[Interval], start: int, end: int) -> None:
    """clip() keeps exactly the units inside [start, end)."""
    period = Interval(start, end)
    assert as_units(union(clip(items, period))) == covered(items) & set(range(start, end))


def test_touching_intervals_are_not_concurrent() -> None:
    """[0, 10) then [10, 20) on two GPUs is one GPU at a time: no overage over 1 reserved."""
    assert excess_over({"gpu-a": [Interval(0, 10)], "gpu-b": [Interval(10, 20)]}, 1) == 0


@given(st.dictionaries(st.sampled_from(["g0", "g1", "g2", "g3"]), intervals, max_size=4), st.integers(0, 4))
def test_excess_over_counts_distinct_gpus_above_the_commitment(
    by_gpu: dict[str, list[Interval]], reserved: int
) -> None:
    """excess_over() is the sum over units of max(0, distinct GPUs in use - reserved)."""
    in_use = Counter(t for items in by_gpu.values() for t in covered(items))
    assert excess_over(by_gpu, reserved) == sum(max(0, n - reserved) for n in in_use.values())

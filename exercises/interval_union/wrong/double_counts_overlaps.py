"""A union that merges only an interval nested inside the last piece: one that overlaps it
partly starts a piece of its own, and the overlap is billed twice."""

from __future__ import annotations

from collections.abc import Iterable

from accounting import intervals as reference

Interval = reference.Interval
overlap, intersect, subtract = reference.overlap, reference.intersect, reference.subtract
clip, excess_over = reference.clip, reference.excess_over


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Wrong: a partly overlapping interval is kept as a piece of its own."""
    merged: list[Interval] = []
    for interval in sorted(i for i in intervals if i.end > i.start):
        if merged and interval.end <= merged[-1].end:
            continue
        merged.append(interval)
    return merged


def total(intervals: Iterable[Interval]) -> int:
    """The lengths of the pieces: right only if ``union`` is."""
    return sum(i.length for i in union(intervals))

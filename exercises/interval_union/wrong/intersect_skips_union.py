"""An intersection that walks both sides as given, without unioning them first: an outage
reported twice is credited twice."""

from __future__ import annotations

from collections.abc import Iterable

from accounting import intervals as reference

Interval = reference.Interval
union, total, overlap, subtract = reference.union, reference.total, reference.overlap, reference.subtract
clip, excess_over = reference.clip, reference.excess_over


def intersect(left: Iterable[Interval], right: Iterable[Interval]) -> list[Interval]:
    """Wrong: every pair of pieces that overlaps yields its shared part, duplicates included."""
    out: list[Interval] = []
    for a in sorted(left):
        for b in sorted(right):
            start, end = max(a.start, b.start), min(a.end, b.end)
            if start < end:
                out.append(Interval(start, end))
    return out

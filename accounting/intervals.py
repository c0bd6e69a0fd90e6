"""Half-open time intervals and the sort-and-scan algebra billing needs, in plain Python.

This is the reference the DuckDB engine is tested against, and the interview exercise:
"given overlapping usage intervals per GPU, how many seconds do you bill, and how many do you
credit for outages?". Times are integers (seconds or microseconds, the caller's choice);
every interval is half-open, ``[start, end)``, so ``[a, b)`` and ``[b, c)`` touch without
overlapping and the boundary instant is counted once.

Every function is O(n log n) for the sort and O(n) for the scan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Interval:
    """``[start, end)``; empty when ``end <= start`` (such intervals are dropped by every op)."""

    start: int
    end: int

    @property
    def length(self) -> int:
        """``end - start``, or 0 when the interval is empty."""
        return max(0, self.end - self.start)


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The disjoint, sorted intervals covering exactly the time any input covers.

    Touching intervals are merged: the result's total equals the covered time either way, and
    fewer pieces make later scans cheaper.
    """
    merged: list[Interval] = []
    for interval in sorted(i for i in intervals if i.end > i.start):
        if merged and interval.start <= merged[-1].end:
            if interval.end > merged[-1].end:
                merged[-1] = Interval(merged[-1].start, interval.end)
        else:
            merged.append(interval)
    return merged


def total(intervals: Iterable[Interval]) -> int:
    """Covered time, counting overlaps once."""
    return sum(i.length for i in union(intervals))


def overlap(intervals: Sequence[Interval]) -> int:
    """Time counted more than once: the sum of lengths minus the covered time.

    This is what naive summing over-bills: sum over k of (k - 1) * time covered k times.
    """
    return sum(i.length for i in intervals) - total(intervals)


def intersect(left: Iterable[Interval], right: Iterable[Interval]) -> list[Interval]:
    """The time both sides cover, as disjoint sorted intervals (each side is unioned first,
    so a GPU reporting the same outage twice is not credited twice)."""
    a, b = union(left), union(right)
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i].start, b[j].start), min(a[i].end, b[j].end)
        if start < end:
            out.append(Interval(start, end))
        if a[i].end < b[j].end:
            i += 1
        else:
            j += 1
    return out


def subtract(base: Iterable[Interval], removed: Iterable[Interval]) -> list[Interval]:
    """The time ``base`` covers and ``removed`` does not (usage minus outages)."""
    out: list[Interval] = []
    cuts = union(removed)
    j = 0
    for interval in union(base):
        start = interval.start
        while j < len(cuts) and cuts[j].end <= start:
            j += 1
        k = j
        while k < len(cuts) and cuts[k].start < interval.end:
            if cuts[k].start > start:
                out.append(Interval(start, cuts[k].start))
            start = max(start, cuts[k].end)
            k += 1
        if start < interval.end:
            out.append(Interval(start, interval.end))
    return out


def clip(intervals: Iterable[Interval], period: Interval) -> list[Interval]:
    """Each interval cut to ``period``; those entirely outside it disappear."""
    clipped = (Interval(max(i.start, period.start), min(i.end, period.end)) for i in intervals)
    return [i for i in clipped if i.end > i.start]


def excess_over(by_resource: Mapping[str, Iterable[Interval]], reserved: int) -> int:
    """The time integral of max(0, n(t) - reserved), where n(t) is how many distinct resources
    (GPUs) are in use at t: the overage of a commitment to ``reserved`` GPUs.

    Each resource is unioned first, so a GPU reported twice at once still counts as one.
    """
    if reserved < 0:
        raise ValueError("reserved must not be negative")
    # Ends sort before starts at equal times: [a, b) and [b, c) never count as concurrent.
    edges = sorted(
        (point, delta)
        for intervals in by_resource.values()
        for interval in union(intervals)
        for point, delta in ((interval.start, 1), (interval.end, -1))
    )
    excess = 0
    in_use = 0
    previous = 0
    for point, delta in edges:
        if in_use > reserved:
            excess += (in_use - reserved) * (point - previous)
        in_use += delta
        previous = point
    return excess

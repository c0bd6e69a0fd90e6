"""GPU-seconds from overlapping intervals: write each function; `gpucloud exercises check
interval-union --impl THIS_FILE` runs the suite (a function left raising NotImplementedError
fails only its own cases)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Interval:
    """``[start, end)``; empty when ``end <= start``."""

    start: int
    end: int

    @property
    def length(self) -> int:
        """``end - start``, or 0 when the interval is empty."""
        return max(0, self.end - self.start)


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The disjoint, sorted, non-touching intervals covering exactly what the inputs cover."""
    raise NotImplementedError


def total(intervals: Iterable[Interval]) -> int:
    """Covered time, counting overlaps once."""
    raise NotImplementedError


def overlap(intervals: Sequence[Interval]) -> int:
    """The sum of lengths minus the covered time."""
    raise NotImplementedError


def intersect(left: Iterable[Interval], right: Iterable[Interval]) -> list[Interval]:
    """The time both sides cover, as disjoint sorted intervals."""
    raise NotImplementedError


def subtract(base: Iterable[Interval], removed: Iterable[Interval]) -> list[Interval]:
    """The time ``base`` covers and ``removed`` does not, as disjoint sorted intervals."""
    raise NotImplementedError


def clip(intervals: Iterable[Interval], period: Interval) -> list[Interval]:
    """Each interval cut to ``period``; those entirely outside it dropped."""
    raise NotImplementedError


def excess_over(by_gpu: Mapping[str, Iterable[Interval]], reserved: int) -> int:
    """The integral over time of max(0, distinct GPUs in use - ``reserved``)."""
    raise NotImplementedError

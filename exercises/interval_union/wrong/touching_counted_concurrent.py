"""An overage count that takes each interval's end instant as in use (a closed interval): a GPU
starting as another stops counts as two GPUs at once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from accounting import intervals as reference

Interval = reference.Interval
union, total, overlap, intersect = reference.union, reference.total, reference.overlap, reference.intersect
subtract, clip = reference.subtract, reference.clip


def excess_over(by_gpu: Mapping[str, Iterable[Interval]], reserved: int) -> int:
    """Wrong: ``range(start, end + 1)`` counts the instant a GPU stopped as in use."""
    in_use: Counter[int] = Counter()
    for items in by_gpu.values():
        in_use.update({t for i in union(items) for t in range(i.start, i.end + 1)})
    return sum(max(0, n - reserved) for n in in_use.values())

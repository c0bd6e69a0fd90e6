"""Rules of a tenant's stepped query: which steps it may see, and how a step it held only in
part is aggregated over that part alone.

A query's steps start at ``start_ms + k * step_ms`` (the last one ends at ``end_ms``). For a
node the tenant held during [s, e), a step inside the hold is read as is; a step the hold
covers in part is aggregated over the covered part only (so no sample from outside the hold
reaches the aggregate); a step outside every hold is not returned. When one step holds
several of the tenant's holds (a release and a new placement within one step), the parts'
aggregates combine: counts and sums add, min of mins, max of maxes, the last of the latest
part, an average from the parts' sums and counts, and a rate weighted by each part's length.
No I/O here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from services.metrics.batch import Int64Array
from services.metrics.holds import Interval
from services.metrics.selection import Aggregation, Window


@dataclass(frozen=True)
class PartialStep:
    """A step the tenant held in part: its start and the covered sub-intervals."""

    start_ms: int
    parts: tuple[Interval, ...]


@dataclass(frozen=True)
class RangePlan:
    """How to read one group of nodes (same holds) for a stepped query."""

    # Every step start the tenant may see, ascending.
    steps: Int64Array
    # Runs of whole steps, each read with the query's own step.
    runs: tuple[Window, ...]
    partials: tuple[PartialStep, ...]


def plan_range(window: Window, step_ms: int, holds: Sequence[Interval]) -> RangePlan:
    """Split the steps of ``window`` by how ``holds`` (merged, inside the window) cover them."""
    start, end = window.start_ms, window.end_ms

    def step_end(k: int) -> int:
        return min(start + (k + 1) * step_ms, end)

    runs: list[Window] = []
    partial: dict[int, list[Interval]] = {}
    full_steps: list[range] = []
    for s, e in holds:
        first, last = (s - start) // step_ms, (e - 1 - start) // step_ms
        full_lo = first if s == start + first * step_ms else first + 1
        full_hi = last if e >= step_end(last) else last - 1
        if full_lo <= full_hi:
            runs.append(Window(start + full_lo * step_ms, step_end(full_hi)))
            full_steps.append(range(full_lo, full_hi + 1))
        for k in {first, last} - set(range(full_lo, full_hi + 1)):
            step_start = start + k * step_ms
            partial.setdefault(k, []).append((max(s, step_start), min(e, step_end(k))))
    indexes = np.array(sorted({k for r in full_steps for k in r} | set(partial)), dtype=np.int64)
    return RangePlan(
        steps=start + indexes * step_ms,
        runs=tuple(runs),
        partials=tuple(PartialStep(start + k * step_ms, tuple(sorted(parts))) for k, parts in sorted(partial.items())),
    )


def part_aggregations(aggregation: Aggregation, parts: int) -> tuple[Aggregation, ...]:
    """What to read for each part of a step held in several parts (an average needs sums and counts)."""
    if parts > 1 and aggregation is Aggregation.AVG:
        return (Aggregation.SUM, Aggregation.COUNT)
    return (aggregation,)


def combine(aggregation: Aggregation, parts: Sequence[Interval], reads: Sequence[Sequence[float]]) -> float:
    """One step's aggregate from its parts' aggregates; ``reads[i]`` holds part i's values in the
    order of ``part_aggregations``. NaN (an empty part) contributes nothing; all empty is NaN."""
    first = [r[0] for r in reads]
    present = [(p, v) for p, v in zip(parts, first, strict=True) if not math.isnan(v)]
    if not present:
        return math.nan
    if len(reads) == 1:
        return first[0]
    values = [v for _, v in present]
    if aggregation in (Aggregation.SUM, Aggregation.COUNT):
        return float(sum(values))
    if aggregation is Aggregation.MIN:
        return min(values)
    if aggregation is Aggregation.MAX:
        return max(values)
    if aggregation is Aggregation.LAST:
        return max(present)[1]
    if aggregation is Aggregation.AVG:
        total = sum(r[0] for r in reads if not math.isnan(r[0]))
        count = sum(r[1] for r in reads if not math.isnan(r[1]))
        return total / count if count else math.nan
    # RATE: each part's per-second rate, weighted by how long the part is.
    weights = [p[1] - p[0] for p, _ in present]
    return sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights)

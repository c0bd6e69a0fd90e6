"""The store reads behind Query and QueryRange, for operators (everything) and tenants (holds).

These run on the metrics store's thread (``SampleStore.read``), so a tenant's read of several
holds is one job. Nodes with identical holds (the nodes of one allocation) are read together.
A tenant never receives a series that has nothing inside its holds: not even its labels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from services.metrics.batch import Float64Array, SeriesKey
from services.metrics.holds import Interval
from services.metrics.ranges import combine, part_aggregations, plan_range
from services.metrics.samples import SampleReader, SeriesData
from services.metrics.selection import Aggregation, Selector, Window, tsdb_selector

# Per node, the merged intervals inside the query's window that the tenant held it.
Holds = Mapping[str, tuple[Interval, ...]]
# Per (node, GPU index) the tenant held in part, the merged intervals inside the query's window
# that it held that GPU (holds.gpu_hold_intervals); its nodes are not in Holds.
HeldGpus = Mapping[tuple[str, int], tuple[Interval, ...]]


def _groups(
    selector: Selector, holds: Holds, gpus: HeldGpus
) -> list[tuple[tuple[Interval, ...], Mapping[str, str | frozenset[str]]]]:
    """The reads a tenant's holds take: per set of nodes with the same intervals (and, held in
    part, the same GPU), the intervals and the tsdb matcher (groups left with none of the
    selector's GPUs dropped). A series is in one group at most: a node held in part is not in
    ``holds``, and each of its GPUs is its own."""
    groups: dict[tuple[tuple[Interval, ...], tuple[int, ...]], list[str]] = {}
    for node_id, intervals in sorted(holds.items()):
        if intervals:
            groups.setdefault((intervals, ()), []).append(node_id)
    for (node_id, gpu), intervals in sorted(gpus.items()):
        if intervals:
            groups.setdefault((intervals, (gpu,)), []).append(node_id)
    return [
        (intervals, matcher)
        for (intervals, indexes), nodes in groups.items()
        if (matcher := tsdb_selector(selector, nodes, indexes)) is not None
    ]


def _ordered(series: list[SeriesData]) -> list[SeriesData]:
    return sorted(series, key=lambda s: s.key)


def _everything(selector: Selector) -> Mapping[str, str | frozenset[str]]:
    matcher = tsdb_selector(selector, None)
    assert matcher is not None  # nothing narrows the GPUs
    return matcher


def query_all(reader: SampleReader, selector: Selector, window: Window) -> list[SeriesData]:
    """An operator's raw read: everything the selector matches."""
    return _ordered(reader.query(_everything(selector), window))


def query_held(reader: SampleReader, selector: Selector, holds: Holds, gpus: HeldGpus) -> list[SeriesData]:
    """A tenant's raw read: per group of nodes, one read per hold, each series' pieces joined.

    A read per hold rather than one over the span from the first hold to the last and clipped
    after: samples from between the holds (another tenant's time on the node) then count
    against no read budget (a tenant was refused QUERY_TOO_LARGE for another tenant's
    samples). The stats' ``samples_decoded`` and ``bytes_read`` still count the whole chunks
    the store decodes around a hold's edges."""
    out: list[SeriesData] = []
    for intervals, matcher in _groups(selector, holds, gpus):
        pieces: dict[SeriesKey, list[SeriesData]] = {}
        for start_ms, end_ms in intervals:  # merged and ascending: the pieces join in time order
            for series in reader.query(matcher, Window(start_ms, end_ms)):
                if len(series.timestamps_ms):
                    pieces.setdefault(series.key, []).append(series)
        for parts in pieces.values():
            timestamps = np.concatenate([p.timestamps_ms for p in parts])
            values = np.concatenate([p.values for p in parts])
            out.append(SeriesData(parts[0].labels, timestamps, values))
    return _ordered(out)


def query_range_all(
    reader: SampleReader, selector: Selector, window: Window, step_ms: int, aggregation: Aggregation
) -> list[SeriesData]:
    """An operator's stepped read: the store's own."""
    return _ordered(reader.query_range(_everything(selector), window, step_ms, aggregation))


class _Columns:
    """Values of every series of one group at the steps the tenant may see (NaN until read)."""

    def __init__(self, steps: np.ndarray) -> None:
        self.steps = steps
        self.labels: dict[SeriesKey, dict[str, str]] = {}
        self.values: dict[SeriesKey, Float64Array] = {}

    def column(self, series: SeriesData) -> Float64Array:
        key = series.key
        if key not in self.values:
            self.labels[key] = series.labels
            self.values[key] = np.full(len(self.steps), math.nan)
        return self.values[key]

    def put(self, series: SeriesData) -> None:
        positions = np.searchsorted(self.steps, series.timestamps_ms)
        inside = positions < len(self.steps)
        if not inside.all() or not np.array_equal(self.steps[positions], series.timestamps_ms):
            raise RuntimeError(f"tsdb returned steps off the query's grid for {series.labels}")
        self.column(series)[positions] = series.values

    def series(self) -> list[SeriesData]:
        # Every column is a series the store found samples of inside a hold: kept even when
        # each of its steps is NaN (a rate over one sample), as the operator's read keeps it.
        return [SeriesData(self.labels[key], self.steps.copy(), values) for key, values in self.values.items()]


def query_range_held(
    reader: SampleReader,
    selector: Selector,
    window: Window,
    step_ms: int,
    aggregation: Aggregation,
    holds: Holds,
    gpus: HeldGpus,
) -> list[SeriesData]:
    """A tenant's stepped read: whole steps inside a hold read as is, steps held in part
    aggregated over the held part only (services/metrics/ranges.py), other steps left out."""
    out: list[SeriesData] = []
    for intervals, matcher in _groups(selector, holds, gpus):
        plan = plan_range(window, step_ms, intervals)
        columns = _Columns(plan.steps)
        for run in plan.runs:
            for series in reader.query_range(matcher, run, step_ms, aggregation):
                columns.put(series)
        for partial in plan.partials:
            aggregations = part_aggregations(aggregation, len(partial.parts))
            reads: dict[SeriesKey, list[list[float]]] = {}
            found: dict[SeriesKey, SeriesData] = {}
            for p, (start, end) in enumerate(partial.parts):
                for a, part_aggregation in enumerate(aggregations):
                    for series in reader.query_range(matcher, Window(start, end), end - start, part_aggregation):
                        found.setdefault(series.key, series)
                        grid = reads.setdefault(series.key, _nan_grid(len(partial.parts), len(aggregations)))
                        grid[p][a] = _single(series.values)
            position = int(np.searchsorted(plan.steps, partial.start_ms))
            for key, grid in reads.items():
                columns.column(found[key])[position] = combine(aggregation, partial.parts, grid)
        out.extend(columns.series())
    return _ordered(out)


def _nan_grid(parts: int, aggregations: int) -> list[list[float]]:
    return [[math.nan] * aggregations for _ in range(parts)]


def _single(values: Sequence[float] | Float64Array) -> float:
    """The aggregate of a one-step read (NaN when the store returned no step)."""
    return float(values[0]) if len(values) else math.nan

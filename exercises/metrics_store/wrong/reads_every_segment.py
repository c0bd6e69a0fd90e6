"""A query that opens every segment file and filters by time afterwards: right samples, but
nothing is skipped, and a query of the last hour reads the whole month."""

from __future__ import annotations

from exercises.metrics_store.wrong import _base
from exercises.metrics_store.wrong._base import OutOfOrder, Result, Segment

__all__ = ["MetricsStore", "OutOfOrder", "Result", "Segment"]


class MetricsStore(_base.MetricsStore):
    """Wrong: no segment is pruned by its time range."""

    def query(self, series: str, start_ms: int, end_ms: int) -> Result:
        """Every file read, then the window applied to the samples."""
        everything = self.segments()
        found = [pair for segment in everything for pair in self._read(segment).get(series, [])]
        found += self._head.get(series, [])
        samples = sorted((t, v) for t, v in found if start_ms <= t < end_ms)
        return Result(samples, len(everything), 0)

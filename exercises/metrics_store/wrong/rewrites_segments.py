"""Retention that trims a segment straddling the cutoff: it writes the file again without its
expired samples, so an immutable file changes and a reader holding it sees another."""

from __future__ import annotations

import os

from exercises.metrics_store.wrong import _base
from exercises.metrics_store.wrong._base import OutOfOrder, Result, Segment

__all__ = ["MetricsStore", "OutOfOrder", "Result", "Segment"]


class MetricsStore(_base.MetricsStore):
    """Wrong: retention rewrites the files it cannot delete whole."""

    def enforce_retention(self, now_ms: int) -> list[Segment]:
        """Whole files past the cutoff go; a straddling one is written again with its kept samples."""
        expired = super().enforce_retention(now_ms)
        cutoff = now_ms - self.retention_ms
        for segment in [s for s in self._index if s.min_ms < cutoff]:
            samples = self._read(segment)
            kept = {series: [(t, v) for t, v in pairs if t >= cutoff] for series, pairs in samples.items()}
            os.remove(segment.path)
            trimmed = self._write({series: pairs for series, pairs in kept.items() if pairs})
            self._index = sorted([*(s for s in self._index if s != segment), trimmed], key=lambda s: s.min_ms)
        return expired

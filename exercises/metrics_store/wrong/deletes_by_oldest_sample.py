"""Retention that deletes a segment as soon as its oldest sample is past the cutoff: a file
straddling the cutoff goes, and with it samples the retention promised to keep."""

from __future__ import annotations

import os

from exercises.metrics_store.wrong import _base
from exercises.metrics_store.wrong._base import OutOfOrder, Result, Segment

__all__ = ["MetricsStore", "OutOfOrder", "Result", "Segment"]


class MetricsStore(_base.MetricsStore):
    """Wrong: a segment expires by its oldest sample, not its newest."""

    def enforce_retention(self, now_ms: int) -> list[Segment]:
        """Deletes every file holding any sample older than the cutoff."""
        cutoff = now_ms - self.retention_ms
        expired = [s for s in self._index if s.min_ms < cutoff]
        for segment in expired:
            os.remove(segment.path)
        self._index = [s for s in self._index if s not in expired]
        return expired

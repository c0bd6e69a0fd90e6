"""The metrics-store interface over the project's ``tsdb.Store``, through what ``tsdb`` exports.

Each method is one call of the store and a change of shape: a series name is the label set
``{"series": name}``, ``seal`` is a forced flush, ``Segment`` is the manifest's ``SegmentInfo``
and a query's counts are its ``QueryStats``. No rule of the store is written here: the windows,
the order checks, the pruning and the retention are tsdb's (docs/tsdb.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tsdb

OutOfOrder = tsdb.OutOfOrderError


@dataclass(frozen=True)
class Segment:
    """One sealed segment file: ``tsdb.SegmentInfo``'s path, tmin and tmax."""

    path: str
    min_ms: int
    max_ms: int


@dataclass(frozen=True)
class Result:
    """A query's samples of one series and its ``QueryStats``' opened and skipped segments."""

    samples: list[tuple[int, float]]
    segments_read: int
    segments_skipped: int


def _segment(info: tsdb.SegmentInfo) -> Segment:
    return Segment(info.path, info.tmin, info.tmax)


def _labels(series: str) -> dict[str, str]:
    return {"series": series}


class MetricsStore:
    """A ``tsdb.Store`` opened on ``directory`` with the exercise's window and retention."""

    def __init__(self, directory: Path, *, segment_ms: int, retention_ms: int) -> None:
        self._store = tsdb.Store.open(directory, segment_ms=segment_ms, retention_ms=retention_ms)

    def append(self, series: str, t_ms: int, value: float) -> None:
        """``append_labelled`` of one sample."""
        self._store.append_labelled([_labels(series)], [0], [t_ms], [value])

    def seal(self) -> list[Segment]:
        """``flush(force=True)``: every window of the head cut into a segment of its own."""
        return [_segment(info) for info in self._store.flush(force=True)]

    def segments(self) -> list[Segment]:
        """The manifest, oldest first."""
        return [_segment(info) for info in self._store.segments()]

    def query(self, series: str, start_ms: int, end_ms: int) -> Result:
        """``query`` of the one series; the manifest decided which segments it opened."""
        result = self._store.query(_labels(series), start_ms, end_ms)
        samples = [
            (int(t), float(v)) for found in result.series for t, v in zip(found.timestamps, found.values, strict=True)
        ]
        return Result(samples, result.stats.segments_opened, result.stats.segments_skipped)

    def enforce_retention(self, now_ms: int) -> list[Segment]:
        """``enforce_retention``: the segments among the files it deleted (the others are WAL files)."""
        before = self._store.segments()
        deleted = set(self._store.enforce_retention(now_ms).deleted_files)
        return [_segment(info) for info in before if info.path in deleted]

    def close(self) -> None:
        """``close``: the WAL, its fsync thread and the directory lock."""
        self._store.close()

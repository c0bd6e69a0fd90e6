"""A one-file answer that passes the suite, as a candidate might write it: JSON segment files
and an in-memory list of their time ranges. Each known-wrong answer beside it changes one rule
of this one, so that the suite's verdict on it is about that rule alone."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Segment:
    """One sealed segment file and its oldest and newest sample times (inclusive)."""

    path: str
    min_ms: int
    max_ms: int


@dataclass(frozen=True)
class Result:
    """A query's samples, oldest first, and the segments it read and skipped."""

    samples: list[tuple[int, float]]
    segments_read: int
    segments_skipped: int


class OutOfOrder(Exception):
    """A sample at or before its series' newest, or at or before the newest sealed time."""


Samples = dict[str, list[tuple[int, float]]]


class MetricsStore:
    """The head in memory; each sealed window a JSON file; the sparse index a list of
    ``Segment`` (one entry a file), oldest first."""

    def __init__(self, directory: Path, *, segment_ms: int, retention_ms: int) -> None:
        self.directory = Path(directory)
        self.segment_ms = segment_ms
        self.retention_ms = retention_ms
        self._head: Samples = {}
        self._newest: dict[str, int] = {}
        self._sealed_until: int | None = None
        self._index: list[Segment] = []
        self._seq = 0

    def append(self, series: str, t_ms: int, value: float) -> None:
        """Into the head, after the order checks."""
        for newest in (self._newest.get(series), self._sealed_until):
            if newest is not None and t_ms <= newest:
                raise OutOfOrder(f"{series} at {t_ms}: not after {newest}")
        self._head.setdefault(series, []).append((t_ms, value))
        self._newest[series] = t_ms

    def seal(self) -> list[Segment]:
        """The head's samples grouped by window, one file each."""
        windows: dict[int, Samples] = {}
        for series, samples in self._head.items():
            for t, value in samples:
                windows.setdefault(t // self.segment_ms, {}).setdefault(series, []).append((t, value))
        written = [self._write(windows[window]) for window in sorted(windows)]
        self._head.clear()
        if written:
            self._sealed_until = written[-1].max_ms
        self._index = sorted([*self._index, *written], key=lambda s: (s.min_ms, s.path))
        return written

    def _write(self, samples: Samples) -> Segment:
        times = [t for pairs in samples.values() for t, _ in pairs]
        self._seq += 1
        path = self.directory / f"{min(times)}_{max(times)}_{self._seq:08d}.json"
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps(samples))
        os.replace(scratch, path)
        return Segment(str(path), min(times), max(times))

    def _read(self, segment: Segment) -> Samples:
        stored = json.loads(Path(segment.path).read_text())
        return {series: [(int(t), float(v)) for t, v in pairs] for series, pairs in stored.items()}

    def segments(self) -> list[Segment]:
        """The index."""
        return list(self._index)

    def query(self, series: str, start_ms: int, end_ms: int) -> Result:
        """Only the files whose range meets the window are opened."""
        meeting = [s for s in self._index if s.max_ms >= start_ms and s.min_ms < end_ms]
        found = [pair for segment in meeting for pair in self._read(segment).get(series, [])]
        found += self._head.get(series, [])
        samples = sorted((t, v) for t, v in found if start_ms <= t < end_ms)
        return Result(samples, len(meeting), len(self._index) - len(meeting))

    def enforce_retention(self, now_ms: int) -> list[Segment]:
        """Whole files whose newest sample is past the cutoff."""
        cutoff = now_ms - self.retention_ms
        expired = [s for s in self._index if s.max_ms < cutoff]
        for segment in expired:
            os.remove(segment.path)
        self._index = [s for s in self._index if s.max_ms >= cutoff]
        return expired

    def close(self) -> None:
        """No file stays open."""

"""The segment metrics store: write ``MetricsStore``'s methods; `gpucloud exercises check
metrics-store --impl THIS_FILE` runs the suite (a method left raising NotImplementedError fails
only the cases that call it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Segment:
    """One sealed, immutable segment file: its path, and its oldest and newest sample times
    (milliseconds, both inclusive)."""

    path: str
    min_ms: int
    max_ms: int


@dataclass(frozen=True)
class Result:
    """A query's answer: the series' ``(time, value)`` samples in the window, oldest first, and
    how many segments it read and how many it skipped without reading them."""

    samples: list[tuple[int, float]]
    segments_read: int
    segments_skipped: int


class OutOfOrder(Exception):
    """A sample at or before its series' newest, or at or before the newest sealed time."""


class MetricsStore:
    """Samples of named series, sealed into segment files under ``directory``: one file per
    window of ``segment_ms`` (windows start at multiples of it); ``enforce_retention`` deletes
    what is older than ``retention_ms``."""

    def __init__(self, directory: Path, *, segment_ms: int, retention_ms: int) -> None:
        self.directory = directory
        self.segment_ms = segment_ms
        self.retention_ms = retention_ms

    def append(self, series: str, t_ms: int, value: float) -> None:
        """Add one sample to the head (in memory); OutOfOrder if it is not newer than its
        series' newest sample and than everything sealed."""
        raise NotImplementedError

    def seal(self) -> list[Segment]:
        """Write every sample of the head into immutable segment files, one per window, and
        return them, oldest first; the head is empty afterwards."""
        raise NotImplementedError

    def segments(self) -> list[Segment]:
        """Every segment on disk, oldest first."""
        raise NotImplementedError

    def query(self, series: str, start_ms: int, end_ms: int) -> Result:
        """The samples of ``series`` in ``[start_ms, end_ms)``, from the segments whose time
        range meets the window and from the head; every other segment is skipped, unread."""
        raise NotImplementedError

    def enforce_retention(self, now_ms: int) -> list[Segment]:
        """Delete the segments whose newest sample is older than ``now_ms - retention_ms``, whole
        files only, and return them."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the store holds open (nothing, for a store that keeps no file open)."""

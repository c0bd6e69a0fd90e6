"""The in-memory manifest: every sealed segment's level and time range, so pruning is arithmetic."""

from __future__ import annotations

from bisect import bisect_left

from tsdb.model import SegmentInfo


class Manifest:
    """Segments sorted by (tmin, seq); a window finds its segments by two binary searches."""

    def __init__(self, segments: list[SegmentInfo]) -> None:
        self._segments: list[SegmentInfo] = []
        self._tmin: list[int] = []
        # Running maximum of tmax in tmin order: non-decreasing, so it can be bisected too.
        self._reach: list[int] = []
        self._set(segments)

    def _set(self, segments: list[SegmentInfo]) -> None:
        self._segments = sorted(segments, key=lambda s: (s.tmin, s.seq))
        self._tmin = [s.tmin for s in self._segments]
        self._reach = []
        reach = None
        for s in self._segments:
            reach = s.tmax if reach is None else max(reach, s.tmax)
            self._reach.append(reach)

    def __len__(self) -> int:
        return len(self._segments)

    @property
    def segments(self) -> tuple[SegmentInfo, ...]:
        """Every segment, oldest first."""
        return tuple(self._segments)

    def add(self, segment: SegmentInfo) -> None:
        """Register a newly written segment."""
        self._set([*self._segments, segment])

    def remove(self, paths: set[str]) -> None:
        """Forget deleted segments."""
        self._set([s for s in self._segments if s.path not in paths])

    def overlapping(self, start: int, end: int) -> list[SegmentInfo]:
        """Segments holding any sample time in [start, end), oldest first."""
        # Segments before `lo` all end before start; segments from `hi` on all begin at or after end.
        lo = bisect_left(self._reach, start)
        hi = bisect_left(self._tmin, end)
        return [s for s in self._segments[lo:hi] if s.tmax >= start]

    def next_seq(self) -> int:
        """A sequence number above every segment's."""
        return max((s.seq for s in self._segments), default=0) + 1

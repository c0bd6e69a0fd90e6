"""Store options, checked once at open."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tsdb.errors import InvalidArgumentError

HOUR_MS: Final = 3_600_000
# Compacted segments are cut into chunks of this many L0 windows, each with its own directory
# entries and time range: a narrow query decodes one chunk, not the whole compacted file, and an
# unaligned aggregate decodes two edge chunks. One window: on the bench's day of telemetry, 2 h
# chunks cost 0.524 B/sample against 0.509 for 6 h ones, and decode 2.9x fewer samples for both.
COMPACT_CHUNK_WINDOWS: Final = 1
# zstd level of compacted segments (L0 segments use the Store's zstd_level).
COMPACT_ZSTD_LEVEL: Final = 3
# How many opened segments (mmap + directory) stay cached.
READER_CACHE: Final = 128


@dataclass(frozen=True, slots=True)
class Options:
    """The tunables of a Store (see Store.open)."""

    segment_ms: int = 2 * HOUR_MS
    compacted_segment_ms: int = 24 * HOUR_MS
    retention_ms: int | None = None
    max_bytes: int | None = None
    ooo_window_ms: int = 0
    fsync_interval_ms: int = 50
    zstd_level: int = 1

    def __post_init__(self) -> None:
        def positive(name: str, value: object, allow_zero: bool = False) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if allow_zero else 1):
                raise InvalidArgumentError(f"{name} must be a {'non-negative' if allow_zero else 'positive'} int")

        positive("segment_ms", self.segment_ms)
        positive("compacted_segment_ms", self.compacted_segment_ms)
        positive("ooo_window_ms", self.ooo_window_ms, allow_zero=True)
        positive("fsync_interval_ms", self.fsync_interval_ms, allow_zero=True)
        if self.retention_ms is not None:
            positive("retention_ms", self.retention_ms)
        if self.max_bytes is not None:
            positive("max_bytes", self.max_bytes)
        if self.compacted_segment_ms % self.segment_ms:
            raise InvalidArgumentError("compacted_segment_ms must be a multiple of segment_ms")
        if self.ooo_window_ms > self.segment_ms // 2:
            raise InvalidArgumentError("ooo_window_ms may be at most half of segment_ms")
        if isinstance(self.zstd_level, bool) or not isinstance(self.zstd_level, int) or not 1 <= self.zstd_level <= 22:
            raise InvalidArgumentError("zstd_level must be an int from 1 to 22")

    @property
    def grace_ms(self) -> int:
        """How far past a window's end the newest sample must be before the window is sealed
        automatically: late series (agents pushing slightly behind others) still fit."""
        return self.segment_ms // 2

    @property
    def compacted_span_ms(self) -> int | None:
        """Span of a compacted segment: compacted_segment_ms, capped at 10% of retention and
        rounded down to whole windows; None when that leaves nothing to merge."""
        span = self.compacted_segment_ms
        if self.retention_ms is not None:
            span = min(span, self.retention_ms // 10)
        span -= span % self.segment_ms
        return span if span > self.segment_ms else None

    @property
    def compact_chunk_ms(self) -> int:
        """Chunk length inside compacted segments."""
        return self.segment_ms * COMPACT_CHUNK_WINDOWS

    @property
    def compact_zstd_level(self) -> int:
        """zstd level for compacted segments: higher than L0's."""
        return max(COMPACT_ZSTD_LEVEL, self.zstd_level)

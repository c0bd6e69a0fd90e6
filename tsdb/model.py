"""The values the Store hands back: series with their samples, query statistics and reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np
from numpy.typing import NDArray

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]


class Labels(dict[str, str]):
    """A series' labels: a read-only dict, one instance per series shared by every result that
    names it (copy it with dict(labels) to change it)."""

    __slots__ = ()

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("series labels are read-only; copy them with dict(labels)")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _read_only

    def __reduce__(self) -> tuple[type[Labels], tuple[dict[str, str]]]:
        return (Labels, (dict(self),))

    def __copy__(self) -> Labels:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> Labels:
        return self


@dataclass(slots=True)
class Series:
    """One series in a result: its labels and id, and aligned timestamp (ms) and value arrays.

    labels is read-only (tsdb.model.Labels). For query_range the timestamps are the step starts
    (one read-only array shared by every series of the result) and the values the aggregate per step.
    """

    labels: dict[str, str]
    series_id: int
    timestamps: I64
    values: F64


@dataclass(slots=True)
class QueryStats:
    """What a query touched: segments considered, opened and skipped by time, bytes and samples.

    segments_total counts every segment in the store; a segment is skipped when the in-memory
    manifest shows its time range misses the window, so it was never read. bytes_read counts file
    bytes read (segment metadata read on a cache miss, plus data blobs); samples_decoded counts
    values rebuilt from value blobs (rows asked for x chunk length; for a narrow query, the samples
    of the window); head_samples counts samples
    taken from the in-memory head; chunks_decoded counts (series, chunk) pairs decoded;
    chunks_preaggregated counts (series, chunk) pairs answered from directory aggregates alone.
    """

    segments_total: int = 0
    segments_opened: int = 0
    segments_skipped: int = 0
    bytes_read: int = 0
    samples_decoded: int = 0
    head_samples: int = 0
    chunks_decoded: int = 0
    chunks_preaggregated: int = 0

    def add(self, other: QueryStats) -> None:
        """Count another read of the same store into these stats: ``segments_total`` (the store's
        count, not the read's) keeps the larger, every other counter adds up."""
        self.segments_total = max(self.segments_total, other.segments_total)
        self.segments_opened += other.segments_opened
        self.segments_skipped += other.segments_skipped
        self.bytes_read += other.bytes_read
        self.samples_decoded += other.samples_decoded
        self.head_samples += other.head_samples
        self.chunks_decoded += other.chunks_decoded
        self.chunks_preaggregated += other.chunks_preaggregated


@dataclass(slots=True)
class QueryResult:
    """Raw samples per matching series (series with no sample in the window are left out)."""

    series: list[Series]
    stats: QueryStats


@dataclass(slots=True)
class RangeResult:
    """One aggregate per step per matching series; NaN where a step holds no sample."""

    series: list[Series]
    stats: QueryStats
    step_ms: int
    agg: str


@dataclass(slots=True)
class RetentionReport:
    """What enforce_retention removed. Only whole files are deleted; no byte is rewritten."""

    deleted_files: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    segments_deleted: int = 0
    wal_files_deleted: int = 0
    bytes_on_disk: int = 0


@dataclass(slots=True)
class RecoveryReport:
    """What opening the store replayed from the write-ahead log and what it had to discard.

    A torn or corrupt record ends its WAL file: it and everything after it in that file are
    discarded (counted in records_discarded / samples_discarded where their frames still parse,
    and in bytes_discarded in full). samples_already_sealed counts replayed samples skipped because
    a sealed segment already holds them (a crash between a flush and the WAL truncation).
    series_ids_reserved counts ids that the state file, a segment or the WAL named but the
    catalog no longer held (a damaged catalog): they are kept from new series, and their samples
    are unreachable.
    """

    records_replayed: int = 0
    samples_replayed: int = 0
    records_discarded: int = 0
    samples_discarded: int = 0
    bytes_discarded: int = 0
    samples_already_sealed: int = 0
    catalog_bytes_discarded: int = 0
    series_ids_reserved: int = 0
    wal_files: int = 0
    seconds: float = 0.0
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One sealed segment file as the manifest knows it (from its name and size alone).

    tmin and tmax are the oldest and newest sample times in the file (both inclusive).
    """

    path: str
    level: int
    tmin: int
    tmax: int
    seq: int
    size: int

"""Retention: whole files deleted past the time or size limit; no surviving byte is rewritten.

Order, on which crash recovery relies:

1. The state file (the sealed boundary and the next series id, tsdb.state) is made current
   (``persist_state``) before any WAL file or segment is deleted. A deleted segment may be the
   last file whose header carries the boundary, or that names some series ids; with the state
   durable first, a reopen neither replays the WAL's copy of deleted samples into the head nor
   hands a used id to a new series.
2. WAL files go first, and only those holding no sample at or after the sealed boundary.
3. Then the segments: those whose newest sample is older than ``now - retention_ms``, then with
   ``max_bytes`` the oldest (by newest sample) until segments, WAL and catalog fit. The WAL and
   the catalog are counted but never deleted for size.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from tsdb.model import RetentionReport, SegmentInfo
from tsdb.options import Options
from tsdb.segment_files import SegmentFiles
from tsdb.wal import Wal

log = structlog.get_logger("tsdb")


def expired(segments: tuple[SegmentInfo, ...], now_ms: int, retention_ms: int | None) -> list[SegmentInfo]:
    """Segments whose newest sample is older than now_ms - retention_ms (none without a limit)."""
    if retention_ms is None:
        return []
    cutoff = int(now_ms) - retention_ms
    return [info for info in segments if info.tmax < cutoff]


def over_size(
    segments: tuple[SegmentInfo, ...], doomed: list[SegmentInfo], total: int, max_bytes: int
) -> list[SegmentInfo]:
    """The oldest segments (by newest sample) not already `doomed` to delete until a store of
    `total` bytes, less the doomed ones, fits in `max_bytes`."""
    total -= sum(info.size for info in doomed)
    chosen = {info.path for info in doomed}
    more: list[SegmentInfo] = []
    for info in sorted(segments, key=lambda s: (s.tmax, s.tmin, s.seq)):
        if total <= max_bytes:
            break
        if info.path not in chosen:
            more.append(info)
            chosen.add(info.path)
            total -= info.size
    return more


def enforce(
    now_ms: int,
    *,
    options: Options,
    files: SegmentFiles,
    wal: Wal,
    boundary: int,
    persist_state: Callable[[], None],
    disk_total: Callable[[], int],
) -> RetentionReport:
    """Delete what the limits in `options` no longer keep at `now_ms`, in the module's order.

    boundary: the sealed boundary; disk_total: every byte of the store (segments, WAL, catalog).
    """
    persist_state()
    report = RetentionReport()
    doomed = expired(files.manifest.segments, now_ms, options.retention_ms)
    stale_wal = wal.sealed_files(boundary, everything=False)
    report.deleted_files += [str(f.path) for f in stale_wal]
    report.wal_files_deleted = len(stale_wal)
    report.bytes_freed += wal.drop(stale_wal)
    if options.max_bytes is not None:
        doomed += over_size(files.manifest.segments, doomed, disk_total(), options.max_bytes)
    report.deleted_files += [info.path for info in doomed]
    report.segments_deleted = len(doomed)
    report.bytes_freed += files.delete(doomed)
    report.bytes_on_disk = disk_total()
    if report.deleted_files:
        log.info(
            "tsdb_retention",
            segments_deleted=report.segments_deleted,
            wal_files_deleted=report.wal_files_deleted,
            bytes_freed=report.bytes_freed,
            bytes_on_disk=report.bytes_on_disk,
        )
    return report

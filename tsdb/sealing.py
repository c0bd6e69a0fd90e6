"""Sealing: the head's complete time windows written as L0 segments, and the WAL files this frees.

Order, on which crash recovery relies:

1. A window's samples are written as a segment (fsynced, renamed into place, directory fsynced)
   before they leave the head (Head.peek, then Head.release): a failed write loses nothing, the
   samples stay in the head and the WAL.
2. After a flush that sealed anything, the state file is rewritten (the sealed boundary moved;
   ``persist_state``) before any WAL file is deleted, so a reopen never replays a sealed sample,
   even once retention has deleted the segment that held it.
3. Only then are the WAL files deleted that hold no sample at or after the new boundary (after a
   forced flush that emptied the head: every closed file).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from tsdb._int64 import INT64_MIN
from tsdb.head import Head, Taken
from tsdb.model import SegmentInfo
from tsdb.options import Options
from tsdb.segment_files import SegmentFiles
from tsdb.segment_writer import Grouping, SeriesBatch
from tsdb.wal import Wal

log = structlog.get_logger("tsdb")

# A flush starts a new WAL file once the active one holds this much.
WAL_ROTATE_BYTES: Final = 1 << 20


def due(head: Head, options: Options) -> int | None:
    """The flush limit when the head's oldest window ended at least grace_ms before its newest
    sample (None: nothing is due)."""
    if head.samples and head.max_ts >= next_cut(head, options):
        return head.max_ts - options.grace_ms
    return None


def next_cut(head: Head, options: Options) -> int:
    """The newest-sample time from which an append may complete the head's oldest window
    (INT64_MIN when the head is empty: any append may)."""
    if not head.samples:
        return INT64_MIN
    return (head.oldest // options.segment_ms + 1) * options.segment_ms + options.grace_ms


@dataclass(frozen=True, slots=True)
class Sealer:
    """Seals one store's head into L0 segments (see the module for the order of its steps).

    persist_state makes state.tss current (the Store's); grouping arranges series in a segment.
    """

    head: Head
    wal: Wal
    files: SegmentFiles
    options: Options
    grouping: Grouping
    persist_state: Callable[[], None]

    def flush(self, limit: int, *, force: bool) -> list[SegmentInfo]:
        """Seal every window of the head that ends at or before `limit`, each in its own segment;
        with `force`, then everything left. Returns the new segments."""
        head = self.head
        seg = self.options.segment_ms
        written: list[SegmentInfo] = []
        while head.samples:
            window_end = (head.oldest // seg + 1) * seg
            if window_end > limit:
                break
            written += self._seal(head.peek(window_end), window_end, forced=False)
        if force and head.samples:
            taken = head.peek(None)
            sealed_until = max(int(ts[-1]) for ts in taken.timestamps) + 1
            written += self._seal(taken, sealed_until, forced=True)
        if written:
            # Start a new WAL file (once the active one is worth it) so the old ones can go as soon as
            # they hold only sealed samples; replay skips sealed samples in any file that remains.
            if force or self.wal.active_size >= WAL_ROTATE_BYTES:
                self.wal.rotate()
            self.persist_state()
            self.wal.drop(self.wal.sealed_files(head.boundary, everything=force and not head.samples))
        return written

    def _seal(self, taken: Taken, sealed_until: int, *, forced: bool) -> list[SegmentInfo]:
        """Write a peeked part of the head as a segment, then drop it from the head."""
        written = [self._write_l0(taken, sealed_until, forced=forced)] if taken.sids else []
        self.head.release(taken)
        return written

    def _write_l0(self, taken: Taken, sealed_until: int, *, forced: bool) -> SegmentInfo:
        started = time.perf_counter()
        info = self.files.write(
            SeriesBatch(taken.sids, taken.timestamps, taken.values),
            level=0,
            grouping=self.grouping,
            sealed_until=sealed_until,
            forced=forced,
        )
        log.debug(
            "tsdb_segment_written",
            file=Path(info.path).name,
            series=len(taken.sids),
            samples=sum(int(t.size) for t in taken.timestamps),
            bytes=info.size,
            seconds=round(time.perf_counter() - started, 4),
        )
        return info

"""The Store: a directory holding a label catalog, a write-ahead log and sealed segment files.

The Store opens and recovers the directory, takes appends and answers queries. Sealing the head
into segments (tsdb.sealing), compaction (tsdb.compaction) and retention (tsdb.retention) each
live in a module that states the order of its steps; tsdb.segment_files keeps the segment files.

Layout of a store directory::

    LOCK                 flock'ed while a Store has the directory open
    catalog.tsc          labels of every series (tsdb.catalog)
    state.tss            sealed boundary and next series id (tsdb.state)
    wal/<seq>.wal        write-ahead log (tsdb.wal)
    segments/L<level>_<tmin>_<tmax>_<seq>.tsg   sealed segments (tsdb.segment_format)

Files are 0600 and directories 0700 whatever the umask (tsdb._fs).

Durability: append returns after the batch is written to the WAL (it survives kill -9 from then
on) and is on disk after the next group-commit fsync (within fsync_interval_ms) or sync(). New
series reach the catalog file before any WAL record names them, and the catalog is fsynced first.
The state file is rewritten after a flush moves the sealed boundary and before any WAL file or
segment is deleted (compaction aside: the file it writes carries what its inputs held), so what
retention deleted is never replayed back, and no id that a segment or the WAL names is handed to
a new series.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import structlog
from numpy.typing import ArrayLike, NDArray

from tsdb import compaction, retention, sealing
from tsdb._fs import narrow_files, open_private, private_dir
from tsdb._int64 import INT64_MAX, INT64_MIN
from tsdb.aggregate import Partials, needs
from tsdb.catalog import Catalog, LabelKey, Selector
from tsdb.errors import (
    InvalidArgumentError,
    QueryTooLargeError,
    StateError,
    StoreClosedError,
    StoreLockedError,
    TsdbError,
)
from tsdb.head import FastBatch, Head
from tsdb.manifest import Manifest
from tsdb.model import QueryResult, QueryStats, RangeResult, RecoveryReport, RetentionReport, SegmentInfo, Series
from tsdb.options import READER_CACHE, Options
from tsdb.query import SampleBudget, Sources, read_one, read_range, read_raw
from tsdb.segment_files import SegmentFiles
from tsdb.segment_reader import ReaderCache
from tsdb.segment_writer import Grouping
from tsdb.state import StoreState, read_state, write_state
from tsdb.wal import Wal, encode_sids

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]
# How many sealed samples a batch behind the sealed boundary may make the store read to find
# its repeats: this many per sample behind, plus a few chunks' worth.
_SEALED_LOOKUP_FACTOR = 4
# A stepped read may hold this many partial aggregates per value it may return (a step's
# samples come from several chunks and the head) before it is stopped.
_PARTIALS_PER_VALUE = 4
_SEALED_LOOKUP_SLACK = 4096

log = structlog.get_logger("tsdb")
# Batches of at most this many ids are remembered once validated, up to this many distinct ones.
_KNOWN_BATCH_MAX = 1024
_KNOWN_BATCHES = 4096
_NO_SIDS: I64 = np.empty(0, dtype=np.int64)
_NO_VALUES: F64 = np.empty(0, dtype=np.float64)
_NO_SIDS.setflags(write=False)
_NO_VALUES.setflags(write=False)


@dataclass(slots=True, frozen=True)
class _KnownBatch:
    """An id array already found valid and distinct: its WAL form and the head's fast-path handle."""

    sid_part: bytes
    fast: FastBatch


def _sample_arrays(sids: ArrayLike, values: ArrayLike) -> tuple[I64, F64]:
    """A batch's ids and values as flat int64 and float64 arrays of one length (empty ones for an
    empty batch, whatever its dtypes); InvalidArgumentError when they cannot be."""
    sid_arr = np.asarray(sids)
    if sid_arr.dtype != np.int64:
        if sid_arr.size == 0 and np.asarray(values).size == 0:
            return _NO_SIDS, _NO_VALUES
        if sid_arr.dtype.kind not in "iu":
            raise InvalidArgumentError(f"sids must be integers, got {sid_arr.dtype}")
        sid_arr = sid_arr.astype(np.int64)
    if sid_arr.ndim != 1:
        sid_arr = sid_arr.reshape(-1)
    vals = np.asarray(values, dtype=np.float64)
    if vals.ndim != 1:
        vals = vals.reshape(-1)
    if vals.size != sid_arr.size:
        raise InvalidArgumentError(f"{sid_arr.size} sids but {vals.size} values")
    return sid_arr, vals


class Store:
    """A time-series store in one directory. Use Store.open(); one thread at a time."""

    def __init__(self, path: Path, options: Options, lock_fd: int) -> None:
        self.path = path
        self.options = options
        self._lock_fd = lock_fd
        self._closed = True
        self._segment_dir = path / "segments"
        self._readers = ReaderCache(READER_CACHE)
        self._recovery = RecoveryReport()
        self.catalog: Catalog
        self.head: Head
        self.manifest: Manifest
        self._files: SegmentFiles
        self._grouping: Grouping
        self._wal: Wal
        self._sealer: sealing.Sealer
        self._known_batches: dict[bytes, _KnownBatch] = {}
        self._next_cut = INT64_MIN
        # What state.tss holds (None: there was none at open, and none has been written since).
        self._state: StoreState | None = None
        # The series an append_labelled in progress would create, under ids len(catalog) on.
        self._pending: Sequence[LabelKey] = ()

    # ---- lifecycle ------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        segment_ms: int = 2 * 3_600_000,
        compacted_segment_ms: int = 24 * 3_600_000,
        retention_ms: int | None = None,
        max_bytes: int | None = None,
        ooo_window_ms: int = 0,
        fsync_interval_ms: int = 50,
        zstd_level: int = 1,
    ) -> Store:
        """Open (or create) the store at `path`, replaying its write-ahead log into the head.

        segment_ms: window of a sealed L0 segment (aligned to multiples of it).
        compacted_segment_ms: span compact() merges L0 segments into (capped at 10% of retention).
        retention_ms / max_bytes: what enforce_retention keeps (None: no limit).
        ooo_window_ms: how far behind its newest sample a series may still accept a sample (0: none).
        fsync_interval_ms: group-commit period of the WAL fsync thread (0: fsync in every append).
        zstd_level: compression level of L0 segments (WAL records use wal.WAL_ZSTD_LEVEL).
        """
        options = Options(
            segment_ms=segment_ms,
            compacted_segment_ms=compacted_segment_ms,
            retention_ms=retention_ms,
            max_bytes=max_bytes,
            ooo_window_ms=ooo_window_ms,
            fsync_interval_ms=fsync_interval_ms,
            zstd_level=zstd_level,
        )
        root = Path(path)
        for directory in (root, root / "segments", root / "wal"):
            private_dir(directory)
        lock_fd = open_private(root / "LOCK", os.O_RDWR)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise StoreLockedError(f"{root} is open in another Store") from None
        store = cls(root, options, lock_fd)
        try:
            store._load()
        except BaseException:
            store._abort()
            raise
        return store

    def _abort(self) -> None:
        """Undo a failed open: stop the WAL thread, close files, release the lock."""
        self._closed = True
        try:
            if hasattr(self, "_wal"):
                self._wal.close()
            if hasattr(self, "catalog"):
                self.catalog.close()
        finally:
            self._readers.clear()
            self._release()

    def _load(self) -> None:
        started = time.perf_counter()
        narrowed = sum(narrow_files(d) for d in (self.path, self._segment_dir, self.path / "wal"))
        if narrowed:
            log.warning("tsdb_file_modes_narrowed", path=str(self.path), files=narrowed, mode="0600")
        self._files = SegmentFiles.open(self._segment_dir, self._readers, self.options)
        self.manifest = self._files.manifest
        self.catalog, catalog_load = Catalog.open(self.path / "catalog.tsc")
        self._grouping = Grouping(partition=self.catalog.partition_key, order=self.catalog.order_key)
        reasons = [f"catalog: {catalog_load.reason}"] if catalog_load.reason else []
        try:
            stored = read_state(self.path)
        except StateError as exc:
            log.error("tsdb_state_unreadable", error=str(exc))
            reasons.append(f"state: {exc}")
            stored = None
        self.head = Head(ooo_window_ms=self.options.ooo_window_ms, describe=self._describe)
        self.head.boundary = max(self._files.sealed_boundary(), stored.sealed_until if stored else INT64_MIN)
        files, replay = Wal.replay(self.path / "wal", self.catalog.known)
        # Ids the catalog no longer holds but the state, a segment or the WAL names are taken
        # for good. Without a state file (a store written without one, or a damaged one) only the
        # segments themselves can tell which ids they use.
        next_id = max(replay.max_sid + 1, stored.next_series_id if stored else self._files.max_sid() + 1)
        reserved = self.catalog.reserve(next_id)
        if reserved:
            reasons.append(f"catalog: {reserved} series ids named by stored samples had lost their labels")
        self.head.ensure_rows(len(self.catalog))
        already = 0
        if replay.batches:
            already = self.head.load(
                np.concatenate([b.sids for b in replay.batches]),
                np.concatenate([b.timestamps for b in replay.batches]),
                np.concatenate([b.values for b in replay.batches]),
            )
        self._wal = Wal(
            self.path / "wal",
            files,
            fsync_interval_ms=self.options.fsync_interval_ms,
        )
        self._sealer = sealing.Sealer(
            self.head, self._wal, self._files, self.options, self._grouping, self._persist_state
        )
        self._state = stored
        self._persist_state()
        # Files left by an earlier process that hold no unsealed sample (often just its last active
        # file, empty) go now rather than at the next flush or retention pass, the state written first.
        self._wal.drop(self._wal.sealed_files(self.head.boundary, everything=False))
        self._closed = False
        reasons = replay.reasons + reasons
        self._recovery = RecoveryReport(
            records_replayed=replay.records,
            samples_replayed=self.head.samples,
            records_discarded=replay.records_discarded,
            samples_discarded=replay.samples_discarded,
            bytes_discarded=replay.bytes_discarded + catalog_load.bytes_discarded,
            samples_already_sealed=already,
            catalog_bytes_discarded=catalog_load.bytes_discarded,
            series_ids_reserved=reserved,
            wal_files=len(files),
            seconds=time.perf_counter() - started,
            reason="; ".join(reasons) or None,
        )
        event = log.warning if reasons else log.info
        event(
            "tsdb_opened",
            path=str(self.path),
            segments=len(self.manifest),
            series=len(self.catalog),
            records_replayed=replay.records,
            samples_replayed=self.head.samples,
            records_discarded=replay.records_discarded,
            samples_discarded=replay.samples_discarded,
            bytes_discarded=self._recovery.bytes_discarded,
            seconds=round(self._recovery.seconds, 4),
            reason=self._recovery.reason,
        )
        self._maybe_flush()

    def _persist_state(self) -> None:
        """Make the sealed boundary and the id high-water mark durable (when they moved): called
        at open and by tsdb.sealing before any WAL file is deleted, and by tsdb.retention before
        it deletes anything, so that neither a deleted sample nor a used id can come back on the
        next open."""
        if self.catalog.dirty:
            self.catalog.sync()  # the mark then names no id a crash could drop from the catalog
        state = StoreState(int(self.head.boundary), len(self.catalog))
        if state != self._state:
            write_state(self.path, state)
            self._state = state

    def close(self) -> None:
        """fsync and close everything; the store must not be used afterwards. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._wal.close()
            self.catalog.close()
        finally:
            self._readers.clear()
            self._release()
        log.info("tsdb_closed", path=str(self.path))

    def _release(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store {self.path} is closed")

    @property
    def recovery(self) -> RecoveryReport:
        """What opening the store replayed from the WAL and what it discarded."""
        return self._recovery

    # ---- series ---------------------------------------------------------------------------

    def series_id(self, labels: Mapping[str, str]) -> int:
        """The id of the series with exactly these labels, created in the catalog if new."""
        return int(self.series_ids([labels])[0])

    def series_ids(self, labels: Iterable[Mapping[str, str]]) -> I64:
        """Ids of many series at once (one catalog record for all the new ones), created now,
        whatever becomes of a later append (append_labelled creates them only with a taken batch)."""
        self._check_open()
        ids = self.catalog.ids(labels)
        self.head.ensure_rows(len(self.catalog))
        return ids

    def series_count(self, selector: Selector) -> int:
        """How many series match a selector (see query); {} counts every series."""
        self._check_open()
        return self.catalog.count(selector)

    def _describe(self, sid: int) -> tuple[int, Mapping[str, str]]:
        """How a refusal names series `sid`: its id and labels, or -1 and the labels of a series
        the append_labelled in progress would create."""
        taken = len(self.catalog)
        if sid < taken:
            return sid, self.catalog.labels(sid)
        return -1, dict(self._pending[sid - taken])

    def labels(self, series_id: int) -> dict[str, str]:
        """A copy of the labels of a series."""
        self._check_open()
        if not 0 <= series_id < len(self.catalog) or self.catalog.is_lost(series_id):
            raise InvalidArgumentError(f"no series with id {series_id}")
        return dict(self.catalog.labels(series_id))

    def select(self, selector: Selector) -> I64:
        """Ids of the series matching a selector (see query)."""
        self._check_open()
        return self.catalog.select(selector)

    # ---- writing --------------------------------------------------------------------------

    def append(self, sids: ArrayLike, timestamps_ms: ArrayLike, values: ArrayLike) -> int:
        """Add samples: sids[i] at timestamps_ms[i] (or one timestamp for all) with values[i].

        The batch is checked first and either taken whole or rejected whole (OutOfOrderError,
        InvalidArgumentError). Returns how many samples were added (a sample repeating a stored
        time with a bit-identical value is a retry and is not added again). Returns once the batch
        is written to the WAL; it is durable after the next group-commit fsync or sync().
        """
        if self._closed:
            raise StoreClosedError(f"store {self.path} is closed")
        # The agent's push: the id array of a node seen before, one timestamp, each series newer
        # than its newest sample. It skips every check already made for these ids.
        if (
            type(sids) is np.ndarray
            and isinstance(timestamps_ms, int | np.integer)
            and not isinstance(timestamps_ms, bool)
            and sids.dtype == np.int64
            and sids.ndim == 1
            and sids.size <= _KNOWN_BATCH_MAX
        ):
            known = self._known_batches.get(sids.tobytes())
            if known is not None:
                t = int(timestamps_ms)
                vals = np.asarray(values, dtype=np.float64)
                if vals.shape == sids.shape and self.head.fast_ready(known.fast, t):
                    n = sids.size
                    if self.catalog.dirty:
                        self.catalog.sync()
                    self._wal.append(known.sid_part, n, t, vals, t)
                    self.head.fast_apply(known.fast, t, vals)
                    if t >= self._next_cut:
                        self._cut_after_append()
                    return n
        return self._append_checked(sids, timestamps_ms, values)

    def append_labelled(
        self,
        labels: Sequence[Mapping[str, str]],
        series: ArrayLike,
        timestamps_ms: ArrayLike,
        values: ArrayLike,
        *,
        admit: Callable[[list[int]], None] | None = None,
    ) -> int:
        """Add samples named by labels: sample i belongs to the series labelled
        ``labels[series[i]]``, at timestamps_ms[i] (or one timestamp for all) with values[i].

        Like append, but series the store does not hold yet are created only if the whole batch
        is taken: a refused batch (OutOfOrderError, InvalidArgumentError) leaves the catalog as it
        was. The new series' catalog record is written, and fsynced, just before the WAL record
        that names them. A new series holds no sample, so only the sealed boundary can refuse
        one (OutOfOrderError with series_id -1). Every label set must have at least one sample.

        ``admit``, when the batch has new series, is called with their positions in ``labels``
        (the first of each, ascending) before the batch is checked: whatever it raises refuses
        the batch, with nothing changed. It may read the store (a caller's limit on series).
        """
        self._check_open()
        sids, new = self.catalog.resolve(labels)
        index = np.asarray(series)
        if index.dtype.kind not in "iu":
            raise InvalidArgumentError(f"series must be integer indices into labels, got {index.dtype}")
        index = index.reshape(-1)
        if index.size and (int(index.min()) < 0 or int(index.max()) >= sids.size):
            raise InvalidArgumentError(f"series indices must lie in [0, {sids.size}) for {sids.size} label sets")
        index = index.astype(np.intp, copy=False)
        unused = np.flatnonzero(np.bincount(index, minlength=sids.size) == 0)
        if unused.size:
            raise InvalidArgumentError(f"labels[{int(unused[0])}] has no samples: a series is created with its first")
        sample_sids = sids[index]
        if not new:
            return self.append(sample_sids, timestamps_ms, values)
        if admit is not None:
            fresh = np.flatnonzero(sids >= len(self.catalog))
            _, first = np.unique(sids[fresh], return_index=True)
            admit(np.sort(fresh[first]).tolist())
        self.head.ensure_rows(len(self.catalog) + len(new))
        self._pending = new
        try:
            return self._append_checked(sample_sids, timestamps_ms, values, new_series=new)
        finally:
            self._pending = ()

    def ensure_wal_present(self) -> None:
        """Raise WalError when the write-ahead log's file was deleted under the open store (the
        store's directory removed, say), and refuse every append from then on: an append
        writes into the open file whether or not a path still names it. A caller that
        acknowledges writes checks this after ``append``."""
        self._wal.ensure_present()

    def _append_checked(
        self, sids: ArrayLike, timestamps_ms: ArrayLike, values: ArrayLike, *, new_series: Sequence[LabelKey] = ()
    ) -> int:
        """append() for any batch: validate it whole against the head, then log and insert it.

        `new_series`: label sets to create under ids len(catalog) on (which `sids` may name)
        once the batch is found acceptable, and only then.
        """
        sid_arr, vals = _sample_arrays(sids, values)
        if sid_arr.size == 0:
            return 0
        # The same id sets come back push after push (one per node): remember the ones already
        # found valid and distinct, with their encoded WAL form.
        # Ids of series not created yet are not remembered: the batch may still be refused.
        key = sid_arr.tobytes() if sid_arr.size <= _KNOWN_BATCH_MAX and not new_series else None
        known = self._known_batches.get(key) if key is not None else None
        unique: bool | None = True
        if known is None:
            if not new_series and not self.catalog.known(sid_arr).all():
                raise InvalidArgumentError("sids must be ids returned by series_id/series_ids")
            unique = self.head.unique(sid_arr)
            if unique and key is not None and len(self._known_batches) < _KNOWN_BATCHES:
                known = self._known_batches[key] = _KnownBatch(encode_sids(sid_arr), self.head.fast_batch(sid_arr))
        stamps = self._timestamps(timestamps_ms, sid_arr.size)
        if (stamps if isinstance(stamps, int) else int(stamps.min())) < self.head.boundary:
            stamps = np.full(sid_arr.size, stamps, dtype=np.int64) if isinstance(stamps, int) else stamps
            sid_arr, stamps, vals = self._without_sealed_repeats(sid_arr, stamps, vals)
            known, unique = None, None
        plan = self.head.check(sid_arr, stamps, vals, unique=unique)
        if new_series:
            # The batch is taken: its new series exist from here on (durable with the sync below).
            self.catalog.create(new_series)
        if plan.size == 0:
            return 0
        sid_part = known.sid_part if known is not None and plan.sids is sid_arr else encode_sids(plan.sids)
        # A WAL record may only name series whose catalog entries are already durable.
        if self.catalog.dirty:
            self.catalog.sync()
        self._wal.append(sid_part, plan.size, plan.timestamps, plan.values, plan.max_ts)
        self.head.apply(plan)
        if self.head.max_ts >= self._next_cut:
            self._cut_after_append()
        return plan.size

    def _without_sealed_repeats(self, sids: I64, ts: I64, vals: F64) -> tuple[I64, I64, F64]:
        """The batch less the samples behind the sealed boundary that repeat a sealed sample bit
        for bit: a batch resent after its first delivery was sealed is a retry, as it would be
        while in the head. Other samples behind the boundary stay, for check to refuse.

        Only batches reaching behind the boundary pay for this, with one read of their series
        over the span they reach back to. A resend holds what it repeats, so a span holding
        several times more samples is not read through: the batch is then refused as before.
        """
        behind = np.flatnonzero(ts < self.head.boundary)
        lo, hi = int(ts[behind].min()), int(ts[behind].max()) + 1
        span = hi - lo
        series, rank = np.unique(sids[behind], return_inverse=True)
        if series.size * span >= 2**62:
            return sids, ts, vals  # (series, time) keys would overflow: far from any retry
        budget = SampleBudget(_SEALED_LOOKUP_FACTOR * behind.size + _SEALED_LOOKUP_SLACK)
        sources = Sources(self.manifest.overlapping(lo, hi), self._readers, self.head)
        try:
            held = read_raw(series, lo, hi, sources, QueryStats(), budget)
        except QueryTooLargeError:
            return sids, ts, vals
        # One sorted key per (series, time), series in np.unique's order: a single search finds
        # every repeat.
        held_keys = np.concatenate([r * span + (held_ts - lo) for r, (held_ts, _) in enumerate(held)])
        if held_keys.size == 0:
            return sids, ts, vals
        held_vals = np.concatenate([held_vals for _, held_vals in held])
        keys = rank * span + (ts[behind] - lo)
        position = np.minimum(np.searchsorted(held_keys, keys), held_keys.size - 1)
        same_value = held_vals[position].view(np.uint64) == vals[behind].view(np.uint64)
        keep = np.ones(sids.size, dtype=bool)
        keep[behind[(held_keys[position] == keys) & same_value]] = False
        return sids[keep], ts[keep], vals[keep]

    def _cut_after_append(self) -> None:
        """Seal what an append completed. A storage failure (a full disk, a damaged file) is
        logged, not raised: the batch is stored, and an append either happens whole or raises
        with nothing changed. Any other error is a defect and is raised."""
        try:
            self._maybe_flush()
        except (OSError, TsdbError) as exc:
            # The batch itself is in the WAL and the head: report it as added. Sealing is retried
            # a quarter window later (and flush() raises the error to its caller).
            self._next_cut = self.head.max_ts + self.options.segment_ms // 4
            log.error("tsdb_flush_failed", error=str(exc), error_type=type(exc).__name__)

    @staticmethod
    def _timestamps(timestamps_ms: ArrayLike, size: int) -> int | I64:
        if isinstance(timestamps_ms, int | np.integer) and not isinstance(timestamps_ms, bool):
            return int(timestamps_ms)
        ts_arr = np.asarray(timestamps_ms)
        if ts_arr.dtype.kind not in "iu":
            raise InvalidArgumentError(f"timestamps_ms must be integers, got {ts_arr.dtype}")
        if ts_arr.ndim == 0:
            return int(ts_arr)
        stamps = ts_arr.astype(np.int64, copy=False).reshape(-1)
        if stamps.size != size:
            raise InvalidArgumentError(f"{size} sids but {stamps.size} timestamps")
        return stamps

    def sync(self) -> None:
        """fsync the catalog and the WAL now."""
        self._check_open()
        self.catalog.sync()
        self._wal.sync()

    # ---- sealing (tsdb.sealing) -----------------------------------------------------------

    def _maybe_flush(self) -> None:
        """Seal windows that ended at least grace_ms before the newest sample."""
        limit = sealing.due(self.head, self.options)
        if limit is not None:
            self._flush(limit, force=False)
        # The first append reaching this time may complete the oldest window.
        self._next_cut = sealing.next_cut(self.head, self.options)

    def flush(self, force: bool = False) -> list[SegmentInfo]:
        """Seal the head's complete windows into segment files and return the new segments.

        A window is complete once the newest sample is at least half a window past its end (the
        margin lets slower agents' samples for it still arrive); appends seal those on their own,
        so this matters after a quiet spell. force=True seals everything: afterwards the head is
        empty and only samples newer than everything it sealed are accepted.
        """
        self._check_open()
        # Forced, every window up to the newest sample is cut on its own, then the rest of the last one.
        return self._flush(self.head.max_ts - (0 if force else self.options.grace_ms), force=force)

    def _flush(self, limit: int, *, force: bool) -> list[SegmentInfo]:
        written = self._sealer.flush(limit, force=force)
        self._next_cut = INT64_MIN
        return written

    # ---- compaction (tsdb.compaction) -----------------------------------------------------

    def compact(self) -> list[SegmentInfo]:
        """Merge the L0 segments of each complete compaction span into one L1 segment.

        A span is complete when it ends at or before the sealed boundary. The new file is written
        (and renamed into place) before its inputs are deleted; it lists them, so a crash between
        the two is finished on the next open. Returns the new segments.
        """
        self._check_open()
        return compaction.compact(self._files, self.options, self.head.boundary, self._grouping)

    # ---- retention (tsdb.retention) -------------------------------------------------------

    def enforce_retention(self, now_ms: int) -> RetentionReport:
        """Delete whole files: segments whose newest sample is older than now_ms - retention_ms,
        WAL files whose samples are all sealed, then (with max_bytes) the oldest segments until
        every byte of the store (segments, WAL, catalog) fits. No surviving file is touched."""
        self._check_open()
        # A deleted segment may be the last record of the sealed boundary: enforce makes the
        # state durable before it deletes anything.
        return retention.enforce(
            now_ms,
            options=self.options,
            files=self._files,
            wal=self._wal,
            boundary=self.head.boundary,
            persist_state=self._persist_state,
            disk_total=self._disk_total,
        )

    def disk_usage(self) -> dict[str, int]:
        """Bytes on disk by kind: segments, wal, catalog, and their total."""
        self._check_open()
        segments = sum(info.size for info in self.manifest.segments)
        wal = sum(entry.stat().st_size for entry in os.scandir(self.path / "wal") if entry.is_file())
        catalog = self.catalog.size()
        return {"segments": segments, "wal": wal, "catalog": catalog, "total": segments + wal + catalog}

    def _disk_total(self) -> int:
        return self.disk_usage()["total"]

    def segments(self) -> tuple[SegmentInfo, ...]:
        """Every sealed segment, oldest first."""
        self._check_open()
        return self.manifest.segments

    # ---- reading --------------------------------------------------------------------------

    @staticmethod
    def _window(start_ms: Any, end_ms: Any) -> tuple[int, int]:
        for name, value in (("start_ms", start_ms), ("end_ms", end_ms)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise InvalidArgumentError(f"{name} must be an int (ms since the epoch), got {value!r}")
        start, end = int(start_ms), int(end_ms)
        if end <= start:
            raise InvalidArgumentError(f"empty window: end_ms {end} <= start_ms {start}")
        return start, end

    def _sources(self, sids: I64, start: int, end: int) -> tuple[Sources, QueryStats]:
        """What a read of `sids` over [start, end) reads from (no segment when no series matched),
        and its stats with the segments counted."""
        segments = self.manifest.overlapping(start, end) if sids.size else []
        total = len(self.manifest)
        stats = QueryStats(segments_total=total, segments_opened=len(segments), segments_skipped=total - len(segments))
        return Sources(segments, self._readers, self.head), stats

    def query(self, selector: Selector, start_ms: int, end_ms: int, *, max_samples: int | None = None) -> QueryResult:
        """Raw samples in [start_ms, end_ms) of every series matching `selector`.

        selector maps a label to a value (exact match) or a collection of values (any of them);
        labels not named match anything; {} selects every series. With `max_samples`, a query
        that matches more raises QueryTooLargeError as soon as it has read past the limit.
        """
        if self._closed:
            raise StoreClosedError(f"store {self.path} is closed")
        if type(start_ms) is int and type(end_ms) is int and start_ms < end_ms:
            start, end = start_ms, end_ms
        else:
            start, end = self._window(start_ms, end_ms)
        sids = self.catalog.select(selector)
        sources, stats = self._sources(sids, start, end)
        if sids.size == 1:
            # The narrow query: one series, no lists of pieces per series.
            sid = int(sids[0])
            budget = SampleBudget(max_samples)
            ts, vals = read_one(sid, start, end, sources, stats, budget)
            return QueryResult([Series(self.catalog.labels(sid), sid, ts, vals)] if ts.size else [], stats)
        data = read_raw(sids, start, end, sources, stats, SampleBudget(max_samples))
        labels = self.catalog.labels
        pairs = zip(sids.tolist(), data, strict=True)
        series = [Series(labels(sid), sid, ts, vals) for sid, (ts, vals) in pairs if ts.size]
        return QueryResult(series, stats)

    def query_range(
        self, selector: Selector, start_ms: int, end_ms: int, step_ms: int, agg: str, *, max_cells: int | None = None
    ) -> RangeResult:
        """One aggregate per step of every series matching `selector` (see tsdb.aggregate).

        Steps start at start_ms, start_ms + step_ms, ...; the last one is cut at end_ms. Memory
        goes with the series that have samples in the window times steps: with `max_cells`, a
        query over more raises QueryTooLargeError, while it reads (past a few partial aggregates
        per value) or before it builds the result.
        """
        self._check_open()
        start, end = self._window(start_ms, end_ms)
        if isinstance(step_ms, bool) or not isinstance(step_ms, int | np.integer) or step_ms <= 0:
            raise InvalidArgumentError(f"step_ms must be a positive int, got {step_ms!r}")
        # A step longer than the window is one step cut at end_ms: the same as a step of the
        # window's length, which fits in uint64 however far apart start and end are.
        step = min(int(step_ms), end - start)
        n_steps = -(-(end - start) // step)
        needed = needs(agg)
        sids = self.catalog.select(selector)
        # A partial aggregate's key is series position x steps + step: it must fit in int64.
        if n_steps * max(int(sids.size), 1) > INT64_MAX:
            message = (
                f"step_ms {step} cuts the window into {n_steps} steps for {sids.size} series: too many"
                " to number; use a longer step or a shorter window"
            )
            if max_cells is not None:  # one series with samples would pass the caller's limit
                raise QueryTooLargeError(message, matched=n_steps, limit=max_cells)
            raise InvalidArgumentError(message)
        limit = None if max_cells is None else _PARTIALS_PER_VALUE * max_cells
        partials = Partials(n_steps, needed, limit=limit)
        sources, stats = self._sources(sids, start, end)
        # NaN and infinities propagate as IEEE arithmetic says (docs/tsdb.md): numpy's warnings
        # about them (invalid value in minimum, overflow in a sum) say nothing the answer does not.
        with np.errstate(over="ignore", invalid="ignore"):
            read_range(sids, start, end, step, partials, sources, stats)
            with_samples = partials.with_samples()
        cells = int(with_samples.size) * partials.n_steps
        if max_cells is not None and cells > max_cells:
            raise QueryTooLargeError(
                f"the query matched {with_samples.size} series x {partials.n_steps} steps = {cells} values;"
                f" the limit is {max_cells}",
                matched=cells,
                limit=max_cells,
            )
        with np.errstate(over="ignore", invalid="ignore"):
            values, present = partials.combine(with_samples.size, agg)
        sids = sids[with_samples]
        # Every series shares one read-only array of step starts. Each start lies in int64, but
        # step x k may not (a window from near INT64_MIN): unsigned arithmetic wraps back into it.
        offsets = np.uint64(step) * np.arange(partials.n_steps, dtype=np.uint64)
        starts = (np.uint64(start % 2**64) + offsets).view(np.int64)
        starts.setflags(write=False)
        kept = sids[present].tolist()
        rows = list(values[present]) if not present.all() else list(values)
        series = list(map(Series, self.catalog.labels_of(kept), kept, itertools.repeat(starts), rows))
        return RangeResult(series, stats, int(step_ms), agg)

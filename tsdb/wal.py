"""The write-ahead log: every acknowledged batch, framed and CRC'd, until a sealed segment holds it.

Files live in ``<store>/wal/`` as ``<seq:012d>.wal``: an 8-byte header (``b"TSW1" | version u16 |
reserved u16``) then framed records (tsdb.framing). A record payload is ``type u8 | zstd frame``;
type 1 (samples) decompresses to ``n u32 | ts_mode u8 | ts | sid_mode u8 | sids | values f64[n]``:
ts_mode 0 stores one int64 timestamp for the whole batch, ts_mode 1 stores int64[n]; sid_mode 0
stores u32[n] ids, sid_mode 1 stores only the first id of a run first, first+1, ... (u32).

Writes go straight to the file descriptor with os.write, so a batch survives kill -9 as soon as
append returns. Group commit: a background thread owned by the Wal fsyncs the active file every
`fsync_interval_ms` when something new was written (0 means fsync inside every append). Only the
newest file is ever appended to; a file is deleted once every sample in it is in a sealed segment.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import structlog
import zstandard
from numpy.typing import NDArray

from tsdb import framing
from tsdb._fs import fsync_dir, open_private, write_all
from tsdb.errors import WalError

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]

MAGIC: Final = b"TSW1"
VERSION: Final = 1
HEADER: Final = MAGIC + VERSION.to_bytes(2, "little") + b"\0\0"
SUFFIX: Final = ".wal"
RECORD_SAMPLES: Final = 1
_BATCH: Final = struct.Struct("<IB")
_TS: Final = struct.Struct("<q")
# n, ts_mode 0 and the one timestamp: the head of the usual record (one push, one scrape time).
_BATCH_ONE_TS: Final = struct.Struct("<IBq")
_SID_RUN: Final = struct.Struct("<BI")
_RECORD_TYPE: Final = bytes((RECORD_SAMPLES,))
_RECORD_TYPE_CRC: Final = zlib.crc32(_RECORD_TYPE)
# zstd level of WAL records. A record is one push (about 800 bytes for 96 samples): zstd's fast
# level -1 compresses it 2-3x quicker than level 1 for a record only about 2% larger.
WAL_ZSTD_LEVEL: Final = -1
# A new file is started past this size, so truncation can free space file by file.
MAX_FILE_BYTES: Final = 64 << 20

log = structlog.get_logger("tsdb.wal")


@dataclass(slots=True)
class WalFile:
    """A WAL file and the newest sample time it holds (None: no samples)."""

    seq: int
    path: Path
    max_ts: int | None
    size: int


@dataclass(slots=True)
class Batch:
    """One decoded samples record: series ids, per-sample timestamps and values."""

    sids: I64
    timestamps: I64
    values: F64


@dataclass(slots=True)
class Replay:
    """Everything read back from the WAL on open, and what was discarded."""

    batches: list[Batch] = field(default_factory=list)
    records: int = 0
    records_discarded: int = 0
    samples_discarded: int = 0
    bytes_discarded: int = 0
    reasons: list[str] = field(default_factory=list)
    # The largest series id any intact record names, known or not (-1: none).
    max_sid: int = -1


def encode_sids(sids: I64) -> bytes:
    """The sids part of a record: a run of consecutive ids costs 5 bytes whatever its length."""
    if sids.size and int(sids[-1]) - int(sids[0]) == sids.size - 1 and bool((np.diff(sids) == 1).all()):
        return _SID_RUN.pack(1, int(sids[0]))
    return b"\0" + sids.astype("<u4").tobytes()


def encode_batch(
    sid_part: bytes, n: int, timestamps: int | I64, values: F64, compressor: zstandard.ZstdCompressor
) -> bytes:
    """The framed record of one batch (sid_part from encode_sids)."""
    raw_values = values.astype("<f8", copy=False).tobytes()
    if isinstance(timestamps, int):
        body = b"".join((_BATCH_ONE_TS.pack(n, 0, timestamps), sid_part, raw_values))
    else:
        body = b"".join((_BATCH.pack(n, 1), timestamps.astype("<i8", copy=False).tobytes(), sid_part, raw_values))
    packed = compressor.compress(body)
    # The frame's CRC covers the type byte and the zstd frame, computed without joining them first.
    header = framing.FRAME.pack(len(packed) + 1, zlib.crc32(packed, _RECORD_TYPE_CRC))
    return b"".join((header, _RECORD_TYPE, packed))


def decode_batch(payload: memoryview, decompressor: zstandard.ZstdDecompressor) -> Batch:
    """Decode one record payload; raises ValueError when it does not parse."""
    if len(payload) < 1 or payload[0] != RECORD_SAMPLES:
        raise ValueError(f"unknown WAL record type {payload[0] if len(payload) else None}")
    try:
        body = decompressor.decompress(payload[1:])
    except zstandard.ZstdError as exc:
        raise ValueError(f"WAL record does not decompress: {exc}") from exc
    n, mode = _BATCH.unpack_from(body)
    offset = _BATCH.size
    if mode == 0:
        (t,) = _TS.unpack_from(body, offset)
        timestamps = np.full(n, t, dtype=np.int64)
        offset += _TS.size
    elif mode == 1:
        timestamps = np.frombuffer(body, dtype="<i8", count=n, offset=offset).astype(np.int64)
        offset += 8 * n
    else:
        raise ValueError(f"unknown WAL timestamp mode {mode}")
    sid_mode = body[offset] if len(body) > offset else -1
    if sid_mode == 1:
        (_, first) = _SID_RUN.unpack_from(body, offset)
        sids = np.arange(first, first + n, dtype=np.int64)
        offset += _SID_RUN.size
    elif sid_mode == 0:
        sids = np.frombuffer(body, dtype="<u4", count=n, offset=offset + 1).astype(np.int64)
        offset += 1 + 4 * n
    else:
        raise ValueError(f"unknown WAL sid mode {sid_mode}")
    if len(body) != offset + 8 * n:
        raise ValueError(f"WAL record of {n} samples has {len(body)} bytes")
    values = np.frombuffer(body, dtype="<f8", count=n, offset=offset).astype(np.float64)
    return Batch(sids, timestamps, values)


def _cut_damaged(
    path: Path, data: bytes, good: int, reason: str, decompressor: zstandard.ZstdDecompressor, out: Replay
) -> None:
    """Count what follows offset `good` of a damaged WAL file as discarded, then truncate the file
    there (fsynced)."""
    discarded = len(data) - good
    salvaged = list(framing.salvageable(data, good)) if good else []
    # The damaged record itself (when the damage is past the file header), then the rest.
    out.records_discarded += (1 if good else 0) + len(salvaged)
    for payload in salvaged:
        try:
            out.samples_discarded += int(decode_batch(payload, decompressor).sids.size)
        except ValueError:
            continue
    out.bytes_discarded += discarded
    out.reasons.append(f"{path.name}: {reason}; {discarded} bytes discarded")
    log.warning("wal_truncated", file=path.name, offset=good, bytes_discarded=discarded, reason=reason)
    with open(path, "r+b") as handle:
        handle.truncate(good)
        os.fsync(handle.fileno())


_sync = getattr(os, "fdatasync", os.fsync)


class Wal:
    """Appends batches to the newest WAL file; fsyncs them in groups from its own thread."""

    def __init__(self, directory: Path, files: list[WalFile], *, fsync_interval_ms: int) -> None:
        self.directory = directory
        self.closed_files = files
        self._compressor = zstandard.ZstdCompressor(level=WAL_ZSTD_LEVEL, write_checksum=False)
        self._interval = fsync_interval_ms / 1000.0
        self._lock = threading.Lock()
        self._fd = -1
        self._active: WalFile | None = None
        self._written = 0
        self._synced = 0
        self.error: BaseException | None = None
        self._start_file((files[-1].seq + 1) if files else 1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if fsync_interval_ms > 0:
            self._thread = threading.Thread(target=self._run, name="tsdb-wal-fsync", daemon=True)
            self._thread.start()

    @staticmethod
    def replay(directory: Path, known: Callable[[I64], NDArray[np.bool_]]) -> tuple[list[WalFile], Replay]:
        """Read every WAL file in order; cut each at its first torn or corrupt record. Samples of
        series ids that `known` refuses (their labels are not in the catalog) are left out."""
        directory.mkdir(parents=True, exist_ok=True)
        decompressor = zstandard.ZstdDecompressor()
        out = Replay()
        files: list[WalFile] = []
        for path in sorted(directory.glob(f"*{SUFFIX}")):
            try:
                seq = int(path.stem)
            except ValueError:
                continue
            data = path.read_bytes()
            max_ts: int | None = None
            good = len(HEADER)
            reason: str | None = None
            if not data:
                good = 0  # created, then a crash before its header: nothing was ever in it
            elif len(data) < len(HEADER) or data[: len(MAGIC)] != MAGIC:
                good, reason = 0, "missing or bad WAL file header"
            else:
                end = framing.ScanEnd(good, False, None)
                for offset, payload in framing.scan(data, good, end):
                    try:
                        batch = decode_batch(payload, decompressor)
                    except ValueError as exc:
                        end.good_end, end.damaged, end.reason = offset, True, f"record at offset {offset}: {exc}"
                        break
                    out.records += 1
                    if batch.sids.size:
                        out.max_sid = max(out.max_sid, int(batch.sids.max()))
                    unknown = ~known(batch.sids)
                    if unknown.any():
                        # Only possible when the catalog lost records the WAL still names (an OS
                        # crash that kept WAL pages but not catalog pages, a damaged catalog).
                        out.samples_discarded += int(unknown.sum())
                        out.reasons.append(f"{path.name}: {int(unknown.sum())} samples name unknown series")
                        keep = ~unknown
                        batch = Batch(batch.sids[keep], batch.timestamps[keep], batch.values[keep])
                    if batch.sids.size:
                        out.batches.append(batch)
                        newest = int(batch.timestamps.max())
                        max_ts = newest if max_ts is None else max(max_ts, newest)
                good, reason = end.good_end, end.reason if end.damaged else None
            if reason is not None:
                _cut_damaged(path, data, good, reason, decompressor, out)
            files.append(WalFile(seq, path, max_ts, min(good, len(data))))
        return files, out

    def _start_file(self, seq: int) -> None:
        path = self.directory / f"{seq:012d}{SUFFIX}"
        fd = open_private(path, os.O_WRONLY | os.O_EXCL | os.O_APPEND)
        os.write(fd, HEADER)
        os.fsync(fd)
        fsync_dir(self.directory)
        self._fd = fd
        self._active = WalFile(seq, path, None, len(HEADER))

    def append(self, sid_part: bytes, n: int, timestamps: int | I64, values: F64, max_ts: int) -> None:
        """Write one batch (sid_part from encode_sids); returns once the bytes are in the file
        (the fsync follows by group commit)."""
        if self.error is not None:
            raise WalError(f"WAL is unusable after an earlier failure: {self.error}")
        active = self._active
        assert active is not None
        record = encode_batch(sid_part, n, timestamps, values, self._compressor)
        try:
            write_all(self._fd, record)
        except OSError as exc:
            # Cut off the partial record so later records never follow garbage.
            try:
                os.ftruncate(self._fd, active.size)
            except OSError:
                self.error = exc
            raise WalError(f"WAL write failed: {exc}") from exc
        active.size += len(record)
        if active.max_ts is None or max_ts > active.max_ts:
            active.max_ts = max_ts
        self._written += 1
        if self._thread is None:
            self.sync()
        if active.size >= MAX_FILE_BYTES:
            self.rotate()

    def ensure_present(self) -> None:
        """Raise WalError if the active file was deleted (its directory removed while the store
        was open): what is appended to it now reaches no file a restart would read, so nothing
        more may be acknowledged. One ``fstat``; callers that acknowledge writes call it after
        ``append``, which leaves it out of its own hot path."""
        if self.error is not None:
            raise WalError(f"WAL is unusable after an earlier failure: {self.error}")
        active = self._active
        if self._fd >= 0 and active is not None and os.fstat(self._fd).st_nlink == 0:
            error = WalError(f"WAL file {active.path} was deleted while the store was open; restart it")
            self.error = error
            raise error

    def sync(self) -> None:
        """fsync everything written so far."""
        with self._lock:
            self._sync_locked()

    def _sync_locked(self) -> None:
        target = self._written
        if target == self._synced or self._fd < 0:
            return
        try:
            _sync(self._fd)
        except OSError as exc:
            # After a failed fsync the page cache state is unknown: refuse further writes.
            self.error = exc
            raise WalError(f"WAL fsync failed: {exc}") from exc
        self._synced = target

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.sync()
            except WalError:
                log.error("wal_fsync_failed", error=str(self.error))
                return

    def rotate(self) -> None:
        """Close the active file (fsynced) and start the next one."""
        with self._lock:
            self._sync_locked()
            active = self._active
            assert active is not None
            os.close(self._fd)
            self._fd = -1
            self.closed_files.append(active)
            self._start_file(active.seq + 1)

    def drop(self, files: list[WalFile]) -> int:
        """Delete closed files whose samples are all sealed; returns the bytes freed."""
        freed = 0
        for item in files:
            try:
                freed += item.path.stat().st_size
                item.path.unlink()
            except FileNotFoundError:
                pass
            self.closed_files.remove(item)
        # No directory fsync: should an unlink be lost in a crash, replay skips the sealed samples.
        return freed

    @property
    def active_size(self) -> int:
        """Bytes in the file being appended to."""
        return self._active.size if self._active is not None else 0

    def sealed_files(self, boundary: int, everything: bool) -> list[WalFile]:
        """Closed files holding no sample at or after `boundary` (all closed files if `everything`)."""
        return [f for f in self.closed_files if everything or f.max_ts is None or f.max_ts < boundary]

    def size(self) -> int:
        """Bytes of every WAL file."""
        active = self._active.size if self._active is not None else 0
        return active + sum(f.size for f in self.closed_files)

    def close(self) -> None:
        """Stop the fsync thread, fsync and close the active file."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._fd >= 0:
                if self.error is None:
                    self._sync_locked()
                os.close(self._fd)
                self._fd = -1

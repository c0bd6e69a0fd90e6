"""Reads a sealed segment through mmap: footer and metadata once, then only the blobs asked for."""

from __future__ import annotations

import mmap
import os
import zlib
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any, Final, TypeVar

import numpy as np
from numpy.typing import NDArray

from tsdb import codecs
from tsdb import segment_format as fmt
from tsdb._codec_common import CorruptBlobError, decompress
from tsdb.errors import CorruptSegmentError

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]
_T = TypeVar("_T")

# What series_window returns for a window without samples (never handed to a caller as a result).
_NO_TIMES: Final = np.empty(0, dtype=np.int64)
_NO_VALUES: Final = np.empty(0, dtype=np.float64)
_NO_TIMES.setflags(write=False)
_NO_VALUES.setflags(write=False)


class SegmentReader:
    """An open segment: its tables as numpy columns, and blob access with CRC checks."""

    def __init__(self, path: str) -> None:
        self.path = path
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size < fmt.HEADER.size + fmt.FOOTER.size:
                raise CorruptSegmentError(f"{path}: {size} bytes is too short for a segment")
            self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        try:
            self._parse(size)
        except BaseException:
            self._map.close()
            raise
        self._ts_cache: dict[int, I64] = {}
        self._grids: dict[int, tuple[int, int, int] | tuple[()]] = {}
        # Per chunk, the last read-only id array select() was asked about and its answer.
        self._selected: dict[int, tuple[I64, I64, I64 | slice]] = {}
        self._aggregates: dict[int, tuple[I64, tuple[I64, I64, I64, dict[str, F64]]]] = {}
        self._verified: set[int] = set()

    def _parse(self, size: int) -> None:
        path, view = self.path, self._map
        magic, version, level, flags, tmin, tmax, sealed_until, n_series, _ = fmt.HEADER.unpack_from(view, 0)
        meta_off, meta_len, raw_len, meta_crc, _, _, end_magic = fmt.FOOTER.unpack_from(view, size - fmt.FOOTER.size)
        if magic != fmt.MAGIC or end_magic != fmt.FOOTER_MAGIC or version != fmt.VERSION:
            raise CorruptSegmentError(f"{path}: bad magic or version")
        if meta_off + meta_len + fmt.FOOTER.size != size or meta_off < fmt.HEADER.size:
            raise CorruptSegmentError(f"{path}: footer points outside the file")
        meta = view[meta_off : meta_off + meta_len]
        if zlib.crc32(meta) != meta_crc:
            raise CorruptSegmentError(f"{path}: metadata CRC mismatch")
        try:
            raw = decompress(meta, raw_len)
        except CorruptBlobError as exc:
            raise CorruptSegmentError(f"{path}: metadata: {exc}") from exc
        try:
            counts = fmt.COUNTS.unpack_from(raw, 0)
            offset = fmt.COUNTS.size
            self.chunks, offset = fmt.unpack_columns(fmt.CHUNK_COLUMNS, raw, offset, counts[0])
            self.ts_table, offset = fmt.unpack_columns(fmt.TS_COLUMNS, raw, offset, counts[1])
            self.vg_table, offset = fmt.unpack_columns(fmt.VG_COLUMNS, raw, offset, counts[2])
            directory, offset = fmt.unpack_columns(fmt.DIR_COLUMNS, raw, offset, counts[3])
        except (ValueError, IndexError) as exc:
            raise CorruptSegmentError(f"{path}: metadata tables do not parse: {exc}") from exc
        self.sources = [s for s in raw[offset:].decode().split("\n") if s]
        self.level, self.flags, self.tmin, self.tmax = level, flags, tmin, tmax
        self.sealed_until, self.n_series, self.size = sealed_until, n_series, size
        self.dir_sid: I64 = directory["sid"].astype(np.int64)
        self.dir_vg: I64 = directory["vg"].astype(np.int64)
        self.dir_row: I64 = directory["row"].astype(np.int64)
        self.dir_stats: dict[str, F64] = {k: directory[k] for k in ("first", "last", "min", "max", "sum", "inc")}
        self.chunk_tmin: I64 = self.chunks["tmin"]
        self.chunk_tmax: I64 = self.chunks["tmax"]
        self.chunk_start: I64 = self.chunks["dir_start"].astype(np.int64)
        self.chunk_count: I64 = self.chunks["dir_count"].astype(np.int64)
        self.vg_ts: I64 = self.vg_table["ts"].astype(np.int64)
        self.vg_rows: I64 = np.bincount(self.dir_vg, minlength=self.vg_ts.size)
        self.ts_count: I64 = self.ts_table["count"].astype(np.int64)
        self.ts_tmin: I64 = self.ts_table["tmin"]
        self.ts_tmax: I64 = self.ts_table["tmax"]
        # Per directory row: its timestamp group's sample count and time range (for pruning and
        # for answering from pre-aggregates without a lookup per query).
        self.dir_ts: I64 = self.vg_ts[self.dir_vg]
        self.dir_n: I64 = self.ts_count[self.dir_ts]
        self.dir_tmin: I64 = self.ts_tmin[self.dir_ts]
        self.dir_tmax: I64 = self.ts_tmax[self.dir_ts]
        # Python-list mirrors of the small tables: a single-series query reads them element by
        # element, which lists do several times faster than numpy scalars.
        self.chunk_bounds: list[tuple[int, int, int, int]] = list(
            zip(
                self.chunk_tmin.tolist(),
                self.chunk_tmax.tolist(),
                self.chunk_start.tolist(),
                self.chunk_count.tolist(),
                strict=True,
            )
        )
        self._vg_blob: list[tuple[int, int, int]] = list(
            zip(*(self.vg_table[k].tolist() for k in ("off", "len", "crc")), strict=True)
        )
        self._vg_ts: list[int] = self.vg_ts.tolist()
        self._dir_sid: list[int] = self.dir_sid.tolist()
        self._dir_vg: list[int] = self.dir_vg.tolist()
        self._dir_row: list[int] = self.dir_row.tolist()
        self._ts_blob: list[tuple[int, int, int]] = list(
            zip(*(self.ts_table[k].tolist() for k in ("off", "len", "crc")), strict=True)
        )
        self.bytes_read = fmt.HEADER.size + fmt.FOOTER.size + meta_len

    def close(self) -> None:
        """Unmap the file."""
        self._map.close()

    def _blob(self, off: int, length: int, crc: int) -> bytes:
        if off + length > self.size:
            raise CorruptSegmentError(f"{self.path}: blob at {off} runs past the end of the file")
        # A bytes copy (not a memoryview) so that unmapping never meets an exported buffer.
        blob = self._map[off : off + length]
        # The file is immutable: a blob whose CRC matched once is not checked again while cached.
        if off not in self._verified:
            if zlib.crc32(blob) != crc:
                raise CorruptSegmentError(f"{self.path}: CRC mismatch in the blob at offset {off}")
            self._verified.add(off)
        return blob

    def rows(self, chunk: int, sids: I64) -> tuple[I64, I64]:
        """Directory rows of `sids` in `chunk`: (positions in sids that are present, their rows)."""
        start = int(self.chunk_start[chunk])
        column = self.dir_sid[start : start + int(self.chunk_count[chunk])]
        if sids.size == 1:
            at = int(np.searchsorted(column, sids[0]))
            if at < column.size and column[at] == sids[0]:
                return np.zeros(1, dtype=np.int64), np.array([start + at], dtype=np.int64)
            empty = np.empty(0, dtype=np.int64)
            return empty, empty
        pos = np.searchsorted(column, sids)
        pos_clipped = np.minimum(pos, column.size - 1)
        present = np.flatnonzero((pos < column.size) & (column[pos_clipped] == sids))
        return present, start + pos[present]

    def by_value_group(self, rows: I64) -> list[tuple[int, NDArray[np.intp]]]:
        """Directory `rows` split by value group: (group, indices into rows), in group order."""
        if rows.size == 0:
            return []
        groups = self.dir_vg[rows]
        if rows.size == 1:
            return [(int(groups[0]), np.zeros(1, dtype=np.intp))]
        order = np.argsort(groups, kind="stable")
        cuts = np.flatnonzero(np.diff(groups[order])) + 1
        return [(int(groups[part[0]]), part) for part in np.split(order, cuts)]

    def row_of(self, chunk: int, sid: int) -> int:
        """The directory row of one series in `chunk`, or -1."""
        _, _, start, count = self.chunk_bounds[chunk]
        at = bisect_left(self._dir_sid, sid, start, start + count)
        return at if at < start + count and self._dir_sid[at] == sid else -1

    def series_window(self, row: int, start: int, end: int) -> tuple[I64, F64, int]:
        """One directory row's samples in [start, end): fresh timestamp and value arrays (only that
        slice of the row is rebuilt), and the blob bytes read."""
        vg = self._dir_vg[row]
        ts_index = self._vg_ts[vg]
        grid = self._grids.get(ts_index)
        nbytes = 0
        if grid is None:
            grid, nbytes = self._grid(ts_index)
        if grid:
            # A constant stride: the window's positions by arithmetic, nothing decoded.
            t0, step, count = grid
            lo = 0 if start <= t0 else min(count, -(-(start - t0) // step))
            hi = 0 if end <= t0 else min(count, -(-(end - t0) // step))
            if hi <= lo:
                return _NO_TIMES, _NO_VALUES, nbytes
            ts = np.arange(t0 + lo * step, t0 + hi * step, step, dtype=np.int64)
        else:
            column, column_bytes = self.timestamps(ts_index)
            nbytes += column_bytes
            lo, hi = cut(column, start, end)
            if hi <= lo:
                return _NO_TIMES, _NO_VALUES, nbytes
            ts = column[lo:hi].copy()
        # The narrow query's hot path: the decoder and its arguments, no closure per call.
        values, length = self._decode_blob(
            self._vg_blob, vg, "value group", codecs.decode_value_row, self._dir_row[row], lo, hi
        )
        return ts, values, nbytes + length

    def _grid(self, ts_index: int) -> tuple[tuple[int, int, int] | tuple[()], int]:
        """(t0, step, count) of a timestamp group with a constant positive stride, else (); and the
        blob bytes read to find out. Remembered per group."""
        info, length = self._decode_blob(self._ts_blob, ts_index, "timestamp group", codecs.timestamps_header)
        grid: tuple[int, int, int] | tuple[()] = (
            (info.t0, info.step, info.count) if info.regular and info.step > 0 else ()
        )
        self._grids[ts_index] = grid
        return grid, length

    def select(self, chunk: int, sids: I64) -> tuple[I64, I64 | slice]:
        """Like rows(), but when the chunk holds exactly `sids` (a query over every series) the rows
        come back as a slice, so that every column lookup is a view instead of a gather."""
        memo = self._selected.get(chunk)
        if memo is not None and memo[0] is sids:
            # The catalog hands out one array per selector: the same query again, the same rows.
            return memo[1], memo[2]
        _, _, start, count = self.chunk_bounds[chunk]
        found: tuple[I64, I64 | slice]
        if count == sids.size and np.array_equal(self.dir_sid[start : start + count], sids):
            present = np.arange(count, dtype=np.int64)
            present.setflags(write=False)
            found = present, slice(start, start + count)
        else:
            found = self.rows(chunk, sids)
        if not sids.flags.writeable:
            self._selected[chunk] = (sids, *found)
        return found

    def aggregates(self, chunk: int, sids: I64, rows: I64 | slice) -> tuple[I64, I64, I64, dict[str, F64]]:
        """Sample count, first and last time and the pre-aggregates of directory `rows` (what
        select(chunk, sids) returned), remembered for the last read-only `sids` of each chunk."""
        memo = self._aggregates.get(chunk)
        if memo is not None and memo[0] is sids:
            return memo[1]
        found = (
            self.dir_n[rows],
            self.dir_tmin[rows],
            self.dir_tmax[rows],
            {name: column[rows] for name, column in self.dir_stats.items()},
        )
        if not sids.flags.writeable:
            self._aggregates[chunk] = (sids, found)
        return found

    def timestamps(self, ts_index: int) -> tuple[I64, int]:
        """The decoded timestamp column of a group, and the blob bytes read for it (0 when cached)."""
        cached = self._ts_cache.get(ts_index)
        if cached is not None:
            return cached, 0
        ts, length = self._decode_blob(self._ts_blob, ts_index, "timestamp group", codecs.decode_timestamps)
        ts.setflags(write=False)
        self._ts_cache[ts_index] = ts
        return ts, length

    def values(self, vg: int, rows: I64 | None, out: F64 | None = None) -> tuple[F64, int]:
        """Decoded rows of a value group (in the order given; all when None) and the blob bytes
        read. Into a fresh array, or into `out`, which is then what comes back: a float64 array
        of exactly (len(rows), n) with contiguous rows (rows of a larger matrix, say)."""
        if rows is None:
            return self._decode_blob(self._vg_blob, vg, "value group", partial(codecs.decode_values, out=out))
        return self._decode_blob(self._vg_blob, vg, "value group", partial(codecs.decode_value_rows, out=out), rows)

    def _decode_blob(
        self, table: list[tuple[int, int, int]], index: int, what: str, decode: Callable[..., _T], *args: Any
    ) -> tuple[_T, int]:
        """decode(blob, *args) of blob `index` of a blob table (its CRC checked) and the blob's
        length; a codec error becomes a CorruptSegmentError naming the file and the group."""
        off, length, crc = table[index]
        blob = self._blob(off, length, crc)
        try:
            return decode(blob, *args), length
        except codecs.CodecError as exc:
            raise CorruptSegmentError(f"{self.path}: {what} {index}: {exc}") from exc


class ReaderCache:
    """A small LRU of open segments, so a warm query re-reads no metadata."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._open: OrderedDict[str, SegmentReader] = OrderedDict()

    def get(self, path: str) -> tuple[SegmentReader, int]:
        """The reader for `path` and the bytes read to open it (0 on a hit)."""
        reader = self._open.get(path)
        if reader is not None:
            self._open.move_to_end(path)
            return reader, 0
        reader = SegmentReader(path)
        self._open[path] = reader
        if len(self._open) > self.capacity:
            _, old = self._open.popitem(last=False)
            old.close()
        return reader, reader.bytes_read

    def evict(self, path: str) -> None:
        """Forget (and unmap) a segment, e.g. before deleting it."""
        reader = self._open.pop(path, None)
        if reader is not None:
            reader.close()

    def clear(self) -> None:
        """Unmap everything."""
        for reader in self._open.values():
            reader.close()
        self._open.clear()


def cut(ts: I64, start: int, end: int) -> tuple[int, int]:
    """Index range of [start, end) in sorted `ts` (a whole column inside the window needs no search)."""
    n = ts.size
    if n == 0:
        return 0, 0
    lo = 0 if ts[0] >= start else int(ts.searchsorted(start))
    hi = n if ts[n - 1] < end else int(ts.searchsorted(end))
    return lo, hi

"""Writes one sealed segment file: groups series, encodes blobs, computes the directory, renames.

Series of a chunk whose timestamps are identical share one timestamp group (a node's scrape);
inside a timestamp group, series are split by (field, node) and cut into value groups of up to 8
rows, so a group is normally one field across one node's GPUs. The file is written under a
temporary name (mode 0600), fsynced, renamed into place and the directory fsynced: a reader sees
either no file or the whole file.

Values may be NaN or infinite, or so large that their differences overflow: the pre-aggregates
then hold what IEEE arithmetic gives (NaN, an infinity), as the queries that read them define,
so encoding runs with numpy's overflow and invalid-value warnings silenced.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tsdb import codecs
from tsdb import segment_format as fmt
from tsdb._codec_common import compress
from tsdb._fs import fsync_dir, open_private
from tsdb.aggregate import counter_increase
from tsdb.model import SegmentInfo

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]


@dataclass(slots=True)
class SeriesBatch:
    """Samples to seal: per series id, its sorted timestamps and values."""

    sids: list[int]
    timestamps: list[I64]
    values: list[F64]


@dataclass(slots=True)
class Grouping:
    """How the writer arranges series: partition (never mixed in a value group) and order inside it."""

    partition: Callable[[int], object]
    # A sort key: tuples of comparable parts (the catalog's order_key).
    order: Callable[[int], tuple[Any, ...]]


@dataclass(slots=True)
class _Tables:
    chunk: dict[str, list[int]] = field(default_factory=lambda: {k: [] for k, _ in fmt.CHUNK_COLUMNS})
    ts: dict[str, list[int]] = field(default_factory=lambda: {k: [] for k, _ in fmt.TS_COLUMNS})
    vg: dict[str, list[int]] = field(default_factory=lambda: {k: [] for k, _ in fmt.VG_COLUMNS})
    directory: dict[str, list[np.ndarray]] = field(default_factory=lambda: {k: [] for k, _ in fmt.DIR_COLUMNS})


def _row_stats(block: F64) -> dict[str, F64]:
    """Per row of a (rows, n) block: the directory pre-aggregates."""
    # A counter that drops was reset: the increase over that step is the new value itself.
    increase = counter_increase(block, 1).sum(axis=1)
    return {
        "first": block[:, 0],
        "last": block[:, -1],
        "min": block.min(axis=1),
        "max": block.max(axis=1),
        "sum": block.sum(axis=1),
        "inc": increase,
    }


def _timestamp_groups(pieces: list[tuple[int, I64, F64]]) -> list[list[int]]:
    """Indices of pieces grouped by identical timestamp arrays, in order of first appearance."""
    by_bytes: dict[bytes, list[int]] = {}
    for index, (_, ts, _) in enumerate(pieces):
        # The raw bytes are the exact key (a column is a few kB; hashing it is cheaper than comparing).
        by_bytes.setdefault(ts.tobytes(), []).append(index)
    return list(by_bytes.values())


class _Builder:
    def __init__(self, grouping: Grouping, zstd_level: int) -> None:
        self.grouping = grouping
        self.level = zstd_level
        self.blobs: list[bytes] = []
        self.offset = fmt.HEADER.size
        self.tables = _Tables()

    def _put(self, blob: bytes) -> tuple[int, int, int]:
        where = self.offset
        self.blobs.append(blob)
        self.offset += len(blob)
        return where, len(blob), zlib.crc32(blob)

    def chunk(self, pieces: list[tuple[int, I64, F64]]) -> None:
        tables = self.tables
        dir_start = sum(a.size for a in tables.directory["sid"])
        entries: dict[str, list[np.ndarray]] = {k: [] for k, _ in fmt.DIR_COLUMNS}
        for members in _timestamp_groups(pieces):
            ts = pieces[members[0]][1]
            off, length, crc = self._put(codecs.encode_timestamps(ts, level=self.level))
            ts_index = len(tables.ts["off"])
            for name, value in zip(
                ("off", "len", "count", "tmin", "tmax", "crc"),
                (off, length, ts.size, int(ts[0]), int(ts[-1]), crc),
                strict=True,
            ):
                tables.ts[name].append(value)
            partitions: dict[object, list[int]] = {}
            for index in members:
                partitions.setdefault(self.grouping.partition(pieces[index][0]), []).append(index)
            ordered: list[int] = []
            bounds: list[tuple[int, int]] = []
            for part in partitions.values():
                part.sort(key=lambda i: self.grouping.order(pieces[i][0]))
                bounds += [
                    (len(ordered) + lo, min(len(ordered) + lo + fmt.GROUP_ROWS, len(ordered) + len(part)))
                    for lo in range(0, len(part), fmt.GROUP_ROWS)
                ]
                ordered += part
            # One matrix per timestamp group: the directory aggregates come from one pass over it, and
            # each value group is a contiguous slice of its rows.
            matrix = np.stack([pieces[i][2] for i in ordered])
            for name, column in _row_stats(matrix).items():
                entries[name].append(column)
            entries["sid"].append(np.array([pieces[i][0] for i in ordered], dtype=np.int64))
            for (lo, hi), blob in zip(
                bounds, codecs.encode_value_blocks(matrix, bounds, level=self.level), strict=True
            ):
                off, length, crc = self._put(blob)
                vg_index = len(tables.vg["off"])
                for name, value in zip(("off", "len", "ts", "crc"), (off, length, ts_index, crc), strict=True):
                    tables.vg[name].append(value)
                entries["vg"].append(np.full(hi - lo, vg_index, dtype=np.int64))
                entries["row"].append(np.arange(hi - lo, dtype=np.int64))
        sid = np.concatenate(entries["sid"])
        order = np.argsort(sid, kind="stable")
        for name, _ in fmt.DIR_COLUMNS:
            tables.directory[name].append(np.concatenate(entries[name])[order])
        tables.chunk["tmin"].append(min(int(p[1][0]) for p in pieces))
        tables.chunk["tmax"].append(max(int(p[1][-1]) for p in pieces))
        tables.chunk["dir_start"].append(dir_start)
        tables.chunk["dir_count"].append(sid.size)

    def meta(self, sources: Sequence[str]) -> bytes:
        tables = self.tables
        directory = {name: np.concatenate(parts) for name, parts in tables.directory.items()}
        counts = fmt.COUNTS.pack(
            len(tables.chunk["tmin"]), len(tables.ts["off"]), len(tables.vg["off"]), directory["sid"].size
        )
        return b"".join(
            (
                counts,
                fmt.pack_columns(fmt.CHUNK_COLUMNS, {k: np.asarray(v) for k, v in tables.chunk.items()}),
                fmt.pack_columns(fmt.TS_COLUMNS, {k: np.asarray(v) for k, v in tables.ts.items()}),
                fmt.pack_columns(fmt.VG_COLUMNS, {k: np.asarray(v) for k, v in tables.vg.items()}),
                fmt.pack_columns(fmt.DIR_COLUMNS, directory),
                "\n".join(sources).encode(),
            )
        )


def _chunk_bounds(tmin: int, tmax: int, chunk_ms: int | None) -> list[tuple[int, int]]:
    if chunk_ms is None:
        return [(tmin, tmax + 1)]
    first = tmin // chunk_ms * chunk_ms
    return [(start, start + chunk_ms) for start in range(first, tmax + 1, chunk_ms)]


def _encode(
    batch: SeriesBatch, grouping: Grouping, zstd_level: int, tmin: int, tmax: int, chunk_ms: int | None
) -> _Builder:
    """Every chunk of `batch` encoded: blobs and tables, not yet the metadata."""
    builder = _Builder(grouping, zstd_level)
    for start, end in _chunk_bounds(tmin, tmax, chunk_ms):
        pieces: list[tuple[int, I64, F64]] = []
        for sid, ts, values in zip(batch.sids, batch.timestamps, batch.values, strict=True):
            if chunk_ms is None:
                pieces.append((sid, ts, values))
                continue
            lo, hi = np.searchsorted(ts, (start, end))
            if hi > lo:
                pieces.append((sid, ts[lo:hi], values[lo:hi]))
        if pieces:
            builder.chunk(pieces)
    return builder


def write_segment(
    directory: Path,
    batch: SeriesBatch,
    *,
    seq: int,
    level: int,
    grouping: Grouping,
    zstd_level: int,
    chunk_ms: int | None,
    sealed_until: int,
    forced: bool,
    sources: Sequence[str] = (),
) -> SegmentInfo:
    """Encode `batch` into a new segment file in `directory` (atomically) and describe it."""
    tmin = min(int(ts[0]) for ts in batch.timestamps)
    tmax = max(int(ts[-1]) for ts in batch.timestamps)
    with np.errstate(over="ignore", invalid="ignore"):
        builder = _encode(batch, grouping, zstd_level, tmin, tmax, chunk_ms)
    raw = builder.meta(sources)
    meta = compress(raw, zstd_level)
    n_chunks = len(builder.tables.chunk["tmin"])
    header = fmt.HEADER.pack(
        fmt.MAGIC,
        fmt.VERSION,
        level,
        fmt.FLAG_FORCED if forced else 0,
        tmin,
        tmax,
        sealed_until,
        len(batch.sids),
        n_chunks,
    )
    footer = fmt.FOOTER.pack(builder.offset, len(meta), len(raw), zlib.crc32(meta), 0, 0, fmt.FOOTER_MAGIC)
    name = fmt.segment_name(level, tmin, tmax, seq)
    final = directory / name
    tmp = directory / (name + fmt.TMP_SUFFIX)
    try:
        with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "wb") as handle:
            handle.write(header)
            for blob in builder.blobs:
                handle.write(blob)
            handle.write(meta)
            handle.write(footer)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)
    size = builder.offset + len(meta) + fmt.FOOTER.size
    return SegmentInfo(str(final), level, tmin, tmax, seq, size)

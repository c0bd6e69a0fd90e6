"""The sealed segment file format: constants, fixed structs, file names, the metadata layout.

A segment file (``L{level}_{tmin}_{tmax}_{seq:08d}.tsg``; tmin/tmax are the oldest and newest
sample times inside, inclusive) is, little-endian::

    header   40 B  magic b"TSG1" | version u16 | level u8 | flags u8 | tmin i64 | tmax i64 |
                   sealed_until i64 | n_series u32 | n_chunks u32
    data           timestamp blobs and value blobs (tsdb.codecs), back to back
    meta           one zstd frame: the tables below, column by column
    footer   32 B  meta_off u64 | meta_len u32 | meta_raw_len u32 | meta_crc u32 | reserved u32 x2 |
                   magic b"GST1"

flags bit 0 marks a forced flush (series may continue inside the same window in a later file).
sealed_until: when the file was cut, every sample of every series older than this was sealed.

meta, decompressed: ``n_chunks u32 | n_ts u32 | n_vg u32 | n_dir u32`` then columns:

- chunk table (n_chunks): tmin i64, tmax i64, dir_start u32, dir_count u32 -- a chunk is a time
  slice of the file (the whole file at level 0; compact_chunk_ms at level 1); its directory rows
  are dir_start .. dir_start + dir_count, sorted by series id.
- timestamp groups (n_ts): offset u64, length u32, count u32, tmin i64, tmax i64, crc32 u32 -- one
  column shared by every series of a chunk with identical timestamps (a node's scrape).
- value groups (n_vg): offset u64, length u32, ts_group u32, crc32 u32 -- one codec block of up to
  8 rows: one field across one node's GPUs, all on the same timestamp group.
- directory (n_dir, one row per series per chunk): sid u32, vg u32, row u8, then the
  pre-aggregates first, last, min, max, sum, inc (f64 each; inc is the counter increase between
  consecutive samples, a drop counting as a reset to zero). 57 bytes raw per entry before zstd.
- sources: the names of the files a compaction merged, UTF-8, newline-separated (rest of meta).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

HEADER: Final = struct.Struct("<4sHBBqqqII")
FOOTER: Final = struct.Struct("<QIIIII4s")
COUNTS: Final = struct.Struct("<IIII")
MAGIC: Final = b"TSG1"
FOOTER_MAGIC: Final = b"GST1"
VERSION: Final = 1
FLAG_FORCED: Final = 1
SUFFIX: Final = ".tsg"
TMP_SUFFIX: Final = ".tmp"
GROUP_ROWS: Final = 8

_NAME: Final = re.compile(r"^L(\d+)_(-?\d+)_(-?\d+)_(\d+)\.tsg$")

# Column layouts of the meta tables, in file order: (name, dtype).
CHUNK_COLUMNS: Final = (("tmin", "<i8"), ("tmax", "<i8"), ("dir_start", "<u4"), ("dir_count", "<u4"))
TS_COLUMNS: Final = (("off", "<u8"), ("len", "<u4"), ("count", "<u4"), ("tmin", "<i8"), ("tmax", "<i8"), ("crc", "<u4"))
VG_COLUMNS: Final = (("off", "<u8"), ("len", "<u4"), ("ts", "<u4"), ("crc", "<u4"))
DIR_COLUMNS: Final = (
    ("sid", "<u4"),
    ("vg", "<u4"),
    ("row", "<u1"),
    ("first", "<f8"),
    ("last", "<f8"),
    ("min", "<f8"),
    ("max", "<f8"),
    ("sum", "<f8"),
    ("inc", "<f8"),
)
DIR_ENTRY_BYTES: Final = sum(np.dtype(dtype).itemsize for _, dtype in DIR_COLUMNS)


@dataclass(frozen=True, slots=True)
class SegmentName:
    """What a segment's file name says."""

    level: int
    tmin: int
    tmax: int
    seq: int


def segment_name(level: int, tmin: int, tmax: int, seq: int) -> str:
    """The file name of a segment."""
    return f"L{level}_{tmin}_{tmax}_{seq:08d}{SUFFIX}"


def parse_name(path: Path | str) -> SegmentName | None:
    """Parse a segment file name; None when it is not one."""
    match = _NAME.match(Path(path).name)
    if match is None:
        return None
    level, tmin, tmax, seq = (int(g) for g in match.groups())
    return SegmentName(level, tmin, tmax, seq)


def pack_columns(columns: tuple[tuple[str, str], ...], values: dict[str, np.ndarray]) -> bytes:
    """Concatenate a table's columns, each cast to its stored dtype."""
    return b"".join(np.ascontiguousarray(values[name], dtype=dtype).tobytes() for name, dtype in columns)


def unpack_columns(
    columns: tuple[tuple[str, str], ...], data: bytes, offset: int, count: int
) -> tuple[dict[str, np.ndarray], int]:
    """Read a table's columns starting at `offset`; returns them (native dtypes) and the end offset."""
    out: dict[str, np.ndarray] = {}
    for name, dtype in columns:
        stored = np.dtype(dtype)
        out[name] = np.frombuffer(data, dtype=stored, count=count, offset=offset).astype(stored.newbyteorder("="))
        offset += stored.itemsize * count
    return out, offset

"""The per-GPU union and intersection of bare intervals: the core of billing, for benchmarks
and audits (``bench/accounting.py`` times exactly these functions).

Both run one sorted pass in DuckDB over a packed ``(GPU, time)`` key (``accounting.packing``):
in start order an interval adds ``max(0, end - max(start, latest end before it))`` of coverage.
The GPUs are numbered first, in Arrow, so that any id type (strings, sparse integers) packs into
few bits; the numbers never leave this module.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from accounting import queries
from accounting.connection import connect
from accounting.errors import AccountingError
from accounting.packing import PackedKey

COLUMNS = ("gpu_id", "start_us", "end_us")


class IntervalsError(AccountingError, ValueError):
    """Bare intervals the union cannot take (a missing column, a null)."""


def union_seconds(intervals: pa.Table | duckdb.DuckDBPyRelation) -> pa.Table:
    """Per-GPU union of bare intervals.

    ``intervals`` has columns ``gpu_id`` (any sortable type), ``start_us`` and ``end_us``
    (integers, half-open; an empty or reversed interval covers nothing), as an Arrow table or a
    relation of any DuckDB connection. Returns an Arrow table ``(gpu_id, union_us)`` with a row
    per GPU of the input, sorted by gpu_id: the covered time, overlaps counted once.
    """
    table = _bare(intervals)
    gpus = _Numbering(_one_chunk(table["gpu_id"]))
    key = _key(gpus, table)
    if key is None:
        return _result(gpus, pa.array([], pa.int64()), pa.array([], pa.int64()), "union_us")
    rows = _run(queries.union_by_group("union_input", key), gpus.codes, table["start_us"], table["end_us"])
    return _result(gpus, rows["g"], rows["union_us"], "union_us")


def intersection_seconds(
    usage: pa.Table | duckdb.DuckDBPyRelation, outages: pa.Table | duckdb.DuckDBPyRelation
) -> pa.Table:
    """Per-GPU time covered by both ``usage`` and ``outages`` (the credit), each unioned first.

    Same columns as :func:`union_seconds`; returns ``(gpu_id, intersection_us)`` for every GPU
    with an outage, sorted by gpu_id. A GPU reported twice is not credited twice.

    By inclusion-exclusion, ``|U(usage) & U(outages)| = |U(usage)| + |U(outages)| - |U(both)|``:
    the three unions are groups ``3 g``, ``3 g + 1`` and ``3 g + 2`` of one union pass, on the
    usage of the GPUs that had an outage.
    """
    used, down = _bare(usage), _bare(outages)
    gpu_type = used.schema.field("gpu_id").type
    gpus = _Numbering(pa.concat_arrays([_one_chunk(used["gpu_id"]), _one_chunk(down["gpu_id"]).cast(gpu_type)]))
    codes = gpus.codes.cast(pa.int64())
    used_codes, down_codes = codes[: used.num_rows], codes[used.num_rows :]
    hit = pc.is_in(used_codes, value_set=pc.unique(down_codes))
    used_codes, used = used_codes.filter(hit), used.filter(hit)
    groups = pa.concat_arrays(
        [pc.multiply(used_codes, 3), pc.add(pc.multiply(down_codes, 3), 1)]
        + [pc.add(pc.multiply(side, 3), 2) for side in (used_codes, down_codes)]
    )
    starts = pa.concat_arrays([_one_chunk(used["start_us"]), _one_chunk(down["start_us"])] * 2)
    ends = pa.concat_arrays([_one_chunk(used["end_us"]), _one_chunk(down["end_us"])] * 2)
    key = _key_for(3 * gpus.count, starts, ends)
    if key is None:
        return _result(gpus, pa.array([], pa.int64()), pa.array([], pa.int64()), "intersection_us")
    rows = _run(queries.intersection_by_group("union_input", key), groups, starts, ends)
    return _result(gpus, rows["g"], rows["intersection_us"], "intersection_us")


def _bare(intervals: pa.Table | duckdb.DuckDBPyRelation) -> pa.Table:
    """The three columns, one chunk each, times as int64; no nulls."""
    try:
        if isinstance(intervals, pa.Table):
            table = intervals.select(list(COLUMNS))
        else:
            table = intervals.select(", ".join(COLUMNS)).to_arrow_table()
    except (KeyError, duckdb.BinderException) as error:
        raise IntervalsError(f"intervals need the columns {', '.join(COLUMNS)}: {error}") from error
    if any(table[name].null_count for name in COLUMNS):
        raise IntervalsError("intervals must not have nulls")
    return pa.table(
        {
            "gpu_id": _one_chunk(table["gpu_id"]),
            "start_us": _one_chunk(table["start_us"]).cast(pa.int64()),
            "end_us": _one_chunk(table["end_us"]).cast(pa.int64()),
        }
    )


class _Numbering:
    """Group numbers for GPU ids: for integers in a dense enough range, the id itself (when
    small and non-negative) or the id minus the least one; else, and for every other type, a
    hash numbering of the distinct ids."""

    def __init__(self, ids: pa.Array) -> None:
        self.type = ids.type
        self.ids: pa.Array | None = None  # code -> id; None: the id is the code plus offset
        self.offset = 0
        if pa.types.is_integer(ids.type) and len(ids):
            low, high = pc.min(ids).as_py(), pc.max(ids).as_py()
            # Sparse integers (say, hashes) would waste bits of the key: those get numbered.
            # Small non-negative ones are their own numbers: no copy of a column of millions.
            if high - low < 4 * len(ids) + 1024:
                self.offset = 0 if low >= 0 and high < 4 * len(ids) + 1024 else low
                self.codes: pa.Array = ids if self.offset == 0 else pc.subtract(ids.cast(pa.int64()), low)
                self.count = high - self.offset + 1  # codes are in [0, count)
                return
        encoded = pc.dictionary_encode(ids)
        self.codes = encoded.indices
        self.count = len(encoded.dictionary)
        self.ids = encoded.dictionary

    def decode(self, codes: pa.Array) -> pa.Array:
        """The GPU ids of group numbers."""
        if self.ids is None:
            return pc.add(codes, self.offset).cast(self.type)
        return self.ids.take(codes)


def _key(gpus: _Numbering, table: pa.Table) -> PackedKey | None:
    return _key_for(gpus.count, table["start_us"], table["end_us"])


def _key_for(groups: int, starts: pa.Array, ends: pa.Array) -> PackedKey | None:
    """The packing for these times (None: no rows)."""
    if not len(starts):
        return None
    low = min(pc.min(starts).as_py(), pc.min(ends).as_py())
    high = max(pc.max(starts).as_py(), pc.max(ends).as_py())
    return PackedKey.fitting(groups, low, high)


def _run(statement: str, groups: pa.Array, starts: pa.Array, ends: pa.Array) -> pa.Table:
    """``statement`` over ``union_input(g, start_us, end_us, rid)`` on a fresh connection.

    ``rid``, the row number, is the window's unique tiebreaker: exact duplicate rows tie on the
    key, and although the union does not depend on their order, every window here has a unique
    order (see docs/billing.md). Its cost in the union's CPU time is in docs/performance.md.
    """
    con = connect()
    try:
        con.register(
            "union_input",
            pa.table(
                {
                    "g": groups,
                    "start_us": starts,
                    "end_us": ends,
                    "rid": pa.array(np.arange(len(groups), dtype=np.int32 if len(groups) < 2**31 else np.int64)),
                }
            ),
        )
        return con.sql(statement).to_arrow_table()
    finally:
        con.close()


def _result(
    gpus: _Numbering, codes: pa.ChunkedArray | pa.Array, values: pa.ChunkedArray | pa.Array, name: str
) -> pa.Table:
    """``(gpu_id, name)`` sorted by gpu_id, from group numbers and their values."""
    codes, values = _one_chunk(codes).cast(pa.int64()), _one_chunk(values).cast(pa.int64())
    return pa.table({"gpu_id": gpus.decode(codes), name: values}).sort_by("gpu_id")


def _one_chunk(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if not isinstance(column, pa.ChunkedArray):
        return column
    # combine_chunks() copies even a single chunk: millions of rows for nothing.
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()

"""Query execution over the sealed segments and the head: raw windows and step aggregates.

Segments come pre-pruned by the manifest (time ranges only); inside a segment, chunks are pruned
by their own time range and series are found by binary search in the sorted directory. A value
group is decoded only for the rows asked for, and a (series, chunk) whose samples all fall inside
one aggregation step is answered from the directory's pre-aggregates without decoding anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tsdb.aggregate import Partials, step_index
from tsdb.errors import QueryTooLargeError
from tsdb.head import Head
from tsdb.model import QueryStats, SegmentInfo
from tsdb.segment_reader import ReaderCache, SegmentReader, cut

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Sources:
    """What a read reads from: the sealed segments the manifest picked for its window, the cache
    of their open readers, and the head."""

    segments: list[SegmentInfo]
    readers: ReaderCache
    head: Head


def _chunks_meeting(
    sources: Sources, start: int, end: int, stats: QueryStats
) -> Iterator[tuple[SegmentReader, int, int, int]]:
    """(reader, chunk, tmin, tmax) of every chunk of the sources' segments whose time range meets
    [start, end); the bytes read to open a segment go to `stats`."""
    for info in sources.segments:
        reader, nbytes = sources.readers.get(info.path)
        stats.bytes_read += nbytes
        for chunk, (tmin, tmax, _, _) in enumerate(reader.chunk_bounds):
            if tmin < end and tmax >= start:
                yield reader, chunk, tmin, tmax


def join_parts(parts: list[tuple[I64, F64]]) -> tuple[I64, F64]:
    """One series' (timestamps, values) pieces from several sources, which never overlap in time,
    put in time order and joined into fresh arrays (empty ones when there are no pieces)."""
    if len(parts) == 1:
        # Copies: a result must not alias a cached timestamp column or a decoded block.
        return parts[0][0].copy(), parts[0][1].copy()
    if not parts:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    parts = sorted(parts, key=lambda part: int(part[0][0]))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _decode_by_timestamp_group(
    reader: SegmentReader,
    present: I64,
    rows: I64,
    start: int,
    end: int,
    step: int,
    partials: Partials,
    stats: QueryStats,
) -> None:
    """Decode directory rows and feed them to `partials`, one call per timestamp group: the value
    groups sharing a timestamp column are stacked, so the per-call cost is paid once per node, not
    once per value group."""
    groups = reader.dir_vg[rows]
    ts_groups = reader.vg_ts[groups]
    order = np.lexsort((reader.dir_row[rows], groups, ts_groups))
    present, rows, groups, ts_groups = present[order], rows[order], groups[order], ts_groups[order]
    cuts = np.flatnonzero(np.diff(ts_groups)) + 1
    for lo_run, hi_run in zip([0, *cuts.tolist()], [*cuts.tolist(), rows.size], strict=True):
        ts, ts_bytes = reader.timestamps(int(ts_groups[lo_run]))
        stats.bytes_read += ts_bytes
        lo, hi = cut(ts, start, end)
        if hi <= lo:
            continue
        # Every value group of the run decodes straight into its rows of one matrix.
        matrix = np.empty((hi_run - lo_run, ts.size), dtype=np.float64)
        vg_cuts = np.flatnonzero(np.diff(groups[lo_run:hi_run])) + 1 + lo_run
        for a, b in zip([lo_run, *vg_cuts.tolist()], [*vg_cuts.tolist(), hi_run], strict=True):
            _values(reader, int(groups[a]), reader.dir_row[rows[a:b]], stats, matrix[a - lo_run : b - lo_run])
        partials.add_block(present[lo_run:hi_run], ts[lo:hi], matrix[:, lo:hi], start, step)


def _values(reader: SegmentReader, vg: int, rows: I64, stats: QueryStats, out: F64 | None = None) -> F64:
    """The wanted rows of one value group, decoded into a fresh array or into `out`."""
    whole = rows.size == reader.vg_rows[vg] and bool((rows == np.arange(rows.size)).all())
    block, nbytes = reader.values(vg, None if whole else rows, out)
    stats.bytes_read += nbytes
    stats.samples_decoded += block.size
    stats.chunks_decoded += rows.size
    return block


def _decode(reader: SegmentReader, vg: int, rows: I64, stats: QueryStats) -> tuple[I64, F64]:
    """Timestamps and the wanted rows of one value group."""
    ts, ts_bytes = reader.timestamps(int(reader.vg_ts[vg]))
    stats.bytes_read += ts_bytes
    return ts, _values(reader, vg, rows, stats)


class SampleBudget:
    """Counts the samples a raw read has taken and stops it once they pass ``limit`` (None: no limit)."""

    __slots__ = ("limit", "taken")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.taken = 0

    def take(self, samples: int) -> None:
        """Count ``samples`` more; QueryTooLargeError once past the limit."""
        self.taken += samples
        if self.limit is not None and self.taken > self.limit:
            raise QueryTooLargeError(
                f"the query matched more than {self.limit} samples", matched=self.taken, limit=self.limit
            )


def read_one(
    sid: int,
    start: int,
    end: int,
    sources: Sources,
    stats: QueryStats,
    budget: SampleBudget,
) -> tuple[I64, F64]:
    """read_raw for one series (the narrow query), kept to as few calls as it can be: its samples in
    [start, end) from the segments then the head, as fresh arrays."""
    parts: list[tuple[I64, F64]] = []
    for reader, chunk, _, _ in _chunks_meeting(sources, start, end, stats):
        row = reader.row_of(chunk, sid)
        if row < 0:
            continue
        ts, values, nbytes = reader.series_window(row, start, end)
        stats.bytes_read += nbytes
        if values.size:
            budget.take(values.size)
            stats.samples_decoded += values.size
            stats.chunks_decoded += 1
            parts.append((ts, values))
    ts, values = sources.head.window(sid, start, end)
    if ts.size:
        budget.take(ts.size)
        stats.head_samples += ts.size
        parts.append((ts, values))
    # One piece is already fresh (from the segment or the head): no copy. Segments come oldest
    # first and the head is newest, but L0 and L1 files may interleave, so more are sorted.
    return parts[0] if len(parts) == 1 else join_parts(parts)


def read_raw(
    sids: I64,
    start: int,
    end: int,
    sources: Sources,
    stats: QueryStats,
    budget: SampleBudget,
) -> list[tuple[I64, F64]]:
    """Per series in `sids` (same order), its samples in [start, end) from segments then head;
    QueryTooLargeError as soon as they pass the budget."""
    if sids.size == 1:
        return [read_one(int(sids[0]), start, end, sources, stats, budget)]
    pieces: list[list[tuple[I64, F64]]] = [[] for _ in range(sids.size)]
    for reader, chunk, _, _ in _chunks_meeting(sources, start, end, stats):
        present, rows = reader.rows(chunk, sids)
        if rows.size == 0:
            continue
        for vg, index in reader.by_value_group(rows):
            ts, block = _decode(reader, vg, reader.dir_row[rows[index]], stats)
            lo, hi = cut(ts, start, end)
            if hi <= lo:
                continue
            window = ts[lo:hi]
            positions = present[index].tolist()
            budget.take((hi - lo) * len(positions))
            for k, position in enumerate(positions):
                pieces[position].append((window, block[k, lo:hi]))
    out: list[tuple[I64, F64]] = []
    for position, sid in enumerate(sids.tolist()):
        ts, vals = sources.head.window(sid, start, end)
        if ts.size:
            budget.take(ts.size)
            stats.head_samples += ts.size
            pieces[position].append((ts, vals))
        out.append(join_parts(pieces[position]))
    return out


def read_range(
    sids: I64,
    start: int,
    end: int,
    step: int,
    partials: Partials,
    sources: Sources,
    stats: QueryStats,
) -> None:
    """Add to `partials` every sample of `sids` in [start, end): directory aggregates where a
    (series, chunk) lies inside one step, decoded blocks elsewhere, and the head. Step numbers are
    counted with Python ints or aggregate.step_index, never as an int64 difference from start."""
    n_steps = partials.n_steps
    for reader, chunk, chunk_tmin, chunk_tmax in _chunks_meeting(sources, start, end, stats):
        present, rows = reader.select(chunk, sids)
        if present.size == 0:
            continue
        first = (chunk_tmin - start) // step
        if chunk_tmin >= start and chunk_tmax < end and first == (chunk_tmax - start) // step:
            # The whole chunk lies inside one step, so every series in it does: its directory
            # aggregates are the answer, decided once for the chunk.
            stats.chunks_preaggregated += present.size
            count, tmin, tmax, fields = reader.aggregates(chunk, sids, rows)
            partials.add(present * n_steps + first if n_steps > 1 or first else present, count, tmin, tmax, fields)
            continue
        tmin, tmax = reader.dir_tmin[rows], reader.dir_tmax[rows]
        inside = (tmin >= start) & (tmax < end)
        # step_index counts from start: where tmin is before it, `inside` already says no.
        first_step = step_index(tmin, start, step)
        whole = inside & (first_step == step_index(tmax, start, step))
        if whole.all():
            stats.chunks_preaggregated += present.size
            partials.add(
                present * n_steps + first_step,
                reader.dir_n[rows],
                tmin,
                tmax,
                {name: reader.dir_stats[name][rows] for name in partials.need},
            )
            continue
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop, dtype=np.int64)
        if whole.any():
            picked = rows[whole]
            stats.chunks_preaggregated += picked.size
            partials.add(
                present[whole] * n_steps + first_step[whole],
                reader.dir_n[picked],
                tmin[whole],
                tmax[whole],
                {name: reader.dir_stats[name][picked] for name in partials.need},
            )
        rest = ~whole
        _decode_by_timestamp_group(reader, present[rest], rows[rest], start, end, step, partials, stats)
    positions, ts, vals = sources.head.window_many(sids, start, end)
    stats.head_samples += ts.size
    partials.add_flat(positions, ts, vals, start, step)

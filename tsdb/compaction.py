"""Compaction: the L0 segments of each complete span merged into one L1 segment.

A span (Options.compacted_span_ms) is complete when it ends at or before the sealed boundary: no
sample can join it any more. Order, on which crash recovery relies:

1. The L1 file is written (fsynced, renamed into place, directory fsynced) before any of its
   inputs is deleted, and it lists them as its sources: a crash between the two leaves both, and
   the next open deletes the inputs (SegmentFiles.open).
2. No state.tss write comes first: deleting the inputs deletes no sample, and the new file
   carries the newest sealed boundary of theirs and every series id they name.

Compaction deletes no WAL file and runs only when called.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import structlog
from numpy.typing import NDArray

from tsdb._int64 import INT64_MIN
from tsdb.model import SegmentInfo
from tsdb.options import Options
from tsdb.query import join_parts
from tsdb.segment_files import SegmentFiles
from tsdb.segment_writer import Grouping, SeriesBatch

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]

log = structlog.get_logger("tsdb")


def spans_to_merge(segments: tuple[SegmentInfo, ...], span_ms: int, boundary: int) -> list[list[SegmentInfo]]:
    """The segments of every complete span that still holds an L0 file, one list per span, oldest
    span first. A segment that crosses a span's edge belongs to none."""
    spans: dict[int, list[SegmentInfo]] = {}
    for info in segments:
        start = info.tmin // span_ms * span_ms
        if info.tmax // span_ms * span_ms == start and start + span_ms <= boundary:
            spans.setdefault(start, []).append(info)
    return [spans[start] for start in sorted(spans) if not all(info.level > 0 for info in spans[start])]


def compact(files: SegmentFiles, options: Options, boundary: int, grouping: Grouping) -> list[SegmentInfo]:
    """Merge the segments of every complete span below `boundary`; returns the new segments."""
    span = options.compacted_span_ms
    if span is None:
        return []
    spans = spans_to_merge(files.manifest.segments, span, boundary)
    return [merge(inputs, files, grouping) for inputs in spans]


def merge(inputs: list[SegmentInfo], files: SegmentFiles, grouping: Grouping) -> SegmentInfo:
    """Write the samples of `inputs` as one L1 segment, then delete them (see the module)."""
    started = time.perf_counter()
    batch, sealed_until = _read_all(inputs, files)
    info = files.write(
        batch,
        level=1,
        grouping=grouping,
        sealed_until=sealed_until,
        forced=False,
        sources=[Path(i.path).name for i in inputs],
    )
    files.delete(inputs)
    log.info(
        "tsdb_compacted",
        file=Path(info.path).name,
        inputs=len(inputs),
        bytes_in=sum(i.size for i in inputs),
        bytes_out=info.size,
        seconds=round(time.perf_counter() - started, 3),
    )
    return info


def _read_all(inputs: list[SegmentInfo], files: SegmentFiles) -> tuple[SeriesBatch, int]:
    """Every sample of `inputs`, per series in id order, and the newest sealed boundary among them."""
    per_series: dict[int, list[tuple[I64, F64]]] = {}
    sealed_until = INT64_MIN
    for info in inputs:
        reader, _ = files.readers.get(info.path)
        sealed_until = max(sealed_until, reader.sealed_until)
        # Every directory row at once: the indices it hands back are the rows themselves.
        for vg, rows in reader.by_value_group(np.arange(reader.dir_vg.size)):
            ts, _ = reader.timestamps(int(reader.vg_ts[vg]))
            block, _ = reader.values(vg, reader.dir_row[rows])
            for k, sid in enumerate(reader.dir_sid[rows].tolist()):
                per_series.setdefault(sid, []).append((ts, block[k]))
    sids = sorted(per_series)
    batch = SeriesBatch(sids, [], [])
    for sid in sids:
        ts, values = join_parts(per_series[sid])
        batch.timestamps.append(ts)
        batch.values.append(values)
    return batch, sealed_until

"""query_range over windows wider than int64 can count (from near INT64_MIN to positive times):
every sample lands in its step, from the head, from a chunk wholly inside one step and from a
chunk that straddles a step boundary; a window with more steps than can be numbered is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tsdb
from tests.tsdb.helpers import reference_range

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
SEGMENT_MS = 60_000
AGGS = ("avg", "min", "max", "sum", "count", "last", "rate")
# Samples on both sides of 0, which is a step boundary of every window below.
TIMES = np.arange(-30_000, 30_000, 1_000, dtype=np.int64)
VALUES = np.arange(TIMES.size, dtype=np.float64) * 1.5
WINDOWS = [
    (INT64_MIN, 40_000, 2**61),
    (INT64_MIN, INT64_MAX, 2**62),
    (INT64_MIN + 7, 1_000_000_000, 2**60 + 3),
    (-(2**62), 2**62, 2**61),
    # Step boundaries at 31 ms and at 10 s: inside the sealed chunk [0, 29 s], far from the start.
    (INT64_MIN + 10_000, INT64_MAX, 2**62),
]


def check(store: tsdb.Store, sid: int) -> None:
    for start, end, step in WINDOWS:
        for agg in AGGS:
            (got,) = store.query_range({}, start, end, step, agg).series
            want = reference_range(TIMES, VALUES, start, end, step, agg)
            assert got.timestamps.tolist() == [start + k * step for k in range(want.size)]
            np.testing.assert_allclose(got.values, want, rtol=1e-12, equal_nan=True, err_msg=f"{agg} {start} {step}")
            assert got.series_id == sid


def test_steps_from_int64_min_in_the_head(tmp_path: Path) -> None:
    with tsdb.Store.open(tmp_path / "s", segment_ms=3_600_000) as store:
        sid = store.series_id({"node": "a"})
        store.append(np.full(TIMES.size, sid), TIMES, VALUES)
        assert store.segments() == ()
        check(store, sid)


def test_steps_from_int64_min_in_segments(tmp_path: Path) -> None:
    with tsdb.Store.open(tmp_path / "s", segment_ms=SEGMENT_MS, compacted_segment_ms=2 * SEGMENT_MS) as store:
        sid = store.series_id({"node": "a"})
        store.append(np.full(TIMES.size, sid), TIMES, VALUES)
        store.flush(force=True)
        # Windows [-60 s, 0) and [0, 60 s): most steps hold a whole chunk (answered from the
        # directory); the step boundaries at 31 ms and 10 s cut the second chunk (decoded).
        assert len(store.segments()) == 2
        check(store, sid)
        assert store.compact()
        check(store, sid)


def test_more_steps_than_int64_can_number_are_refused(tmp_path: Path) -> None:
    with tsdb.Store.open(tmp_path / "s") as store:
        store.series_id({"node": "a"})
        with pytest.raises(tsdb.InvalidArgumentError, match="steps"):
            store.query_range({}, INT64_MIN, INT64_MAX, 1, "count")
        with pytest.raises(tsdb.QueryTooLargeError, match="steps"):
            store.query_range({}, INT64_MIN, INT64_MAX, 1, "count", max_cells=1000)

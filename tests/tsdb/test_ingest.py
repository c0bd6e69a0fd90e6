"""Append semantics: whole-batch rejection of out-of-order samples, retries, the bounded
out-of-order window, argument checks, and a closed or doubly opened store."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tsdb
from tests.tsdb.helpers import T0

# A label set with a non-str value, which the store must refuse (typed Any on purpose).
NOT_A_STR_LABEL: dict[str, Any] = {"node": 1}


def open_store(path: Path, **options: int) -> tsdb.Store:
    return tsdb.Store.open(path, segment_ms=60_000, **options)


def snapshot(store: tsdb.Store) -> tuple[list[tuple[int, list[int], list[float]]], int]:
    series = store.query({}, T0 - 10**9, T0 + 10**9).series
    state = [(s.series_id, s.timestamps.tolist(), s.values.tolist()) for s in series]
    return state, store.disk_usage()["wal"]


def test_out_of_order_batch_is_rejected_whole_and_changes_nothing(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        a, b = store.series_ids(
            [{"node": "n0", "gpu": "0", "field": "util"}, {"node": "n0", "gpu": "1", "field": "util"}]
        )
        assert store.append([a, b], T0 + 10_000, [1.0, 2.0]) == 2
        before = snapshot(store)
        with pytest.raises(tsdb.OutOfOrderError) as caught:
            store.append([a, b], T0 + 5_000, [3.0, 4.0])
        error = caught.value
        assert error.series_id in (a, b)
        assert error.timestamp_ms == T0 + 5_000
        assert error.newest_ms == T0 + 10_000
        assert error.rejected == 2
        assert str(T0 + 5_000) in str(error)
        assert "node" in str(error)
        # One good sample and one late one: neither goes in.
        with pytest.raises(tsdb.OutOfOrderError):
            store.append([a, b], [T0 + 20_000, T0 + 9_000], [5.0, 6.0])
        # Two samples of one series in one batch, in the wrong order, are fine: the batch is sorted.
        assert snapshot(store) == before
        assert store.append([a, a], [T0 + 30_000, T0 + 25_000], [8.0, 7.0]) == 2
        got = store.query({"gpu": "0"}, T0, T0 + 60_000).series[0]
        assert got.timestamps.tolist() == [T0 + 10_000, T0 + 25_000, T0 + 30_000]
        assert got.values.tolist() == [1.0, 7.0, 8.0]


def test_an_identical_retry_is_not_stored_twice_but_a_different_value_is_an_error(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        sids = store.series_ids([{"node": "n0", "gpu": str(g), "field": "util"} for g in range(4)])
        values = np.array([1.0, 2.0, np.nan, -0.0])
        assert store.append(sids, T0, values) == 4
        wal = store.disk_usage()["wal"]
        assert store.append(sids, T0, values.copy()) == 0
        assert store.disk_usage()["wal"] == wal
        with pytest.raises(tsdb.OutOfOrderError):
            store.append(sids, T0, [1.0, 2.0, 3.0, 0.0])  # 0.0 is not bit-identical to -0.0
        with pytest.raises(tsdb.OutOfOrderError):
            store.append([sids[0], sids[0]], T0 + 1, [1.0, 2.0])


def test_bounded_out_of_order_window(tmp_path: Path) -> None:
    with open_store(tmp_path / "s", ooo_window_ms=10_000) as store:
        sid = store.series_id({"node": "n0", "gpu": "0", "field": "util"})
        store.append([sid], T0 + 20_000, [1.0])
        store.append([sid], T0 + 15_000, [2.0])  # 5 s late: inside the window
        store.append([sid], T0 + 12_000, [3.0])
        with pytest.raises(tsdb.OutOfOrderError, match="out-of-order window"):
            store.append([sid], T0 + 9_000, [4.0])  # 11 s late
        expected = ([T0 + 12_000, T0 + 15_000, T0 + 20_000], [3.0, 2.0, 1.0])
        got = store.query({}, T0, T0 + 60_000).series[0]
        assert (got.timestamps.tolist(), got.values.tolist()) == expected
    with open_store(tmp_path / "s", ooo_window_ms=10_000) as store:
        got = store.query({}, T0, T0 + 60_000).series[0]
        assert (got.timestamps.tolist(), got.values.tolist()) == expected


def test_samples_behind_the_sealed_boundary_are_rejected(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        a, b = store.series_ids(
            [{"node": "n0", "gpu": "0", "field": "util"}, {"node": "n1", "gpu": "0", "field": "util"}]
        )
        store.append([a, b], T0, [1.0, 1.0])
        store.append([a], T0 + 1_000, [2.0])
        store.flush(force=True)
        # b's newest is T0, but everything up to T0 + 1 s is sealed now.
        with pytest.raises(tsdb.OutOfOrderError, match="sealed boundary"):
            store.append([b], T0 + 500, [2.0])
        assert store.append([b], T0 + 1_001, [2.0]) == 1


def test_bad_arguments_are_value_errors_and_change_nothing(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        sid = store.series_id({"node": "n0", "gpu": "0", "field": "util"})
        before = snapshot(store)
        call: Callable[[], object]
        for call, message in (
            (lambda: store.append([sid], T0, [1.0, 2.0]), "1 sids but 2 values"),
            (lambda: store.append([sid + 1], T0, [1.0]), "sids must be ids returned by series_id/series_ids"),
            (lambda: store.append([-1], T0, [1.0]), "sids must be ids returned by series_id/series_ids"),
            (lambda: store.append([0.5], T0, [1.0]), "sids must be integers, got float64"),
            (lambda: store.append([sid], [T0, T0 + 1], [1.0]), "1 sids but 2 timestamps"),
            (lambda: store.append([sid], [float(T0)], [1.0]), "timestamps_ms must be integers, got float64"),
            (lambda: store.series_id({}), "labels must be a non-empty mapping of str to str"),
            (lambda: store.series_id(NOT_A_STR_LABEL), "names must be non-empty str and values str"),
            (lambda: store.series_id({"": "x"}), "label ''='x': names must be non-empty str"),
        ):
            with pytest.raises(ValueError, match=re.escape(message)):
                call()
        assert snapshot(store) == before
        assert store.append([], T0, []) == 0
    with pytest.raises(ValueError, match="compacted_segment_ms must be a multiple of segment_ms"):
        tsdb.Store.open(tmp_path / "t", segment_ms=60_000, compacted_segment_ms=90_000)
    with pytest.raises(ValueError, match="segment_ms must be a positive int"):
        tsdb.Store.open(tmp_path / "t", segment_ms=0)


def test_a_closed_store_raises_and_a_second_open_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    with pytest.raises(tsdb.StoreLockedError):
        open_store(tmp_path / "s")
    sid = store.series_id({"node": "n0", "gpu": "0", "field": "util"})
    store.close()
    store.close()  # idempotent
    for call in (
        lambda: store.append([sid], T0, [1.0]),
        lambda: store.series_id({"node": "n0"}),
        lambda: store.query({}, T0, T0 + 1),
        lambda: store.query_range({}, T0, T0 + 1, 1, "avg"),
        lambda: store.flush(),
        lambda: store.compact(),
        lambda: store.enforce_retention(T0),
        lambda: store.sync(),
        lambda: store.disk_usage(),
    ):
        with pytest.raises(tsdb.StoreClosedError):
            call()
    with open_store(tmp_path / "s") as again:
        assert again.series_id({"node": "n0", "gpu": "0", "field": "util"}) == sid


def test_flush_leaves_half_a_window_for_late_agents(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        a, b = store.series_ids([{"node": n, "gpu": "0", "field": "util"} for n in ("n0", "n1")])
        window_end = (T0 // 60_000 + 1) * 60_000
        store.append([a, b], T0, [1.0, 1.0])
        store.append([a], window_end + 10_000, [2.0])  # n0 is ahead; n1's push for the window is late
        assert store.flush() == []
        assert store.append([b], window_end - 1_000, [3.0]) == 1
        store.append([a], window_end + 30_000, [4.0])  # half a window past the end: sealed on append
        assert [s.tmax for s in store.segments()] == [window_end - 1_000]
        with pytest.raises(tsdb.OutOfOrderError, match="sealed boundary"):
            store.append([b], window_end - 500, [5.0])
        store.append([a], window_end + 70_000, [6.0])  # two windows in the head now
        store.flush(force=True)  # each window in a file of its own, even when forced
        assert [(s.tmin, s.tmax) for s in store.segments()[1:]] == [
            (window_end + 10_000, window_end + 30_000),
            (window_end + 70_000, window_end + 70_000),
        ]

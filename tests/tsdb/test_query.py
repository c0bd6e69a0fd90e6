"""query and query_range give the numpy reference's answers from the head, from sealed segments
and after compaction; pruning by time opens only the segments a window touches."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tsdb
from tests.tsdb.helpers import T0, Fleet, ingest, make_fleet, reference_range

AGGS = ("avg", "min", "max", "sum", "count", "last", "rate")
EXACT = {"min", "max", "count", "last"}
SEGMENT_MS = 60_000


def check_raw(store: tsdb.Store, fleet: Fleet, start: int, end: int) -> tsdb.QueryResult:
    result = store.query({}, start, end)
    by_id = {s.series_id: s for s in result.series}
    assert len(by_id) == len(fleet.labels)
    for index, labels in enumerate(fleet.labels):
        got = by_id[store.series_id(labels)]
        assert got.labels == labels
        mask = (fleet.timestamps >= start) & (fleet.timestamps < end)
        np.testing.assert_array_equal(got.timestamps, fleet.timestamps[mask])
        np.testing.assert_array_equal(got.values.view(np.uint64), fleet.values[index][mask].view(np.uint64))
        # The narrow path (one series by its whole label set) answers the same.
        alone = store.query(labels, start, end).series
        assert len(alone) == (1 if mask.any() else 0)
        if alone:
            np.testing.assert_array_equal(alone[0].timestamps, got.timestamps)
            np.testing.assert_array_equal(alone[0].values.view(np.uint64), got.values.view(np.uint64))
    return result


def check_range(store: tsdb.Store, fleet: Fleet, start: int, end: int, step: int, agg: str) -> tsdb.RangeResult:
    result = store.query_range({}, start, end, step, agg)
    assert len(result.series) == len(fleet.labels)
    by_id = {s.series_id: s for s in result.series}
    for index, labels in enumerate(fleet.labels):
        got = by_id[store.series_id(labels)]
        want = reference_range(fleet.timestamps, fleet.values[index], start, end, step, agg)
        np.testing.assert_array_equal(got.timestamps, start + step * np.arange(want.size))
        if agg in EXACT:
            np.testing.assert_array_equal(got.values, want)
        else:
            np.testing.assert_allclose(got.values, want, rtol=1e-9, equal_nan=True)
    return result


WINDOWS = [
    # (start, end, step): aligned to segments, unaligned, one step over everything, a tiny window
    (T0 - T0 % SEGMENT_MS, T0 - T0 % SEGMENT_MS + 10 * SEGMENT_MS, SEGMENT_MS),
    (T0 + 12_345, T0 + 555_555, 37_000),
    (T0 - 1, T0 + 700_000, 700_001),
    (T0 + 100_000, T0 + 103_500, 1_000),
]


def open_store(path: Path, **options: int) -> tsdb.Store:
    return tsdb.Store.open(path, segment_ms=SEGMENT_MS, compacted_segment_ms=10 * SEGMENT_MS, **options)


def test_head_segments_and_compacted_answer_alike(tmp_path: Path) -> None:
    fleet = make_fleet(samples=600)
    # segment_ms larger than the data: everything stays in the head.
    with tsdb.Store.open(tmp_path / "head", segment_ms=3_600_000) as store:
        ingest(store, fleet, store.series_ids(fleet.labels))
        assert store.segments() == ()
        for start, end, step in WINDOWS:
            assert check_raw(store, fleet, start, end).stats.head_samples > 0
            for agg in AGGS:
                check_range(store, fleet, start, end, step, agg)

    with open_store(tmp_path / "sealed") as store:
        ingest(store, fleet, store.series_ids(fleet.labels))
        # Sealed automatically up to about a window and a half behind the newest sample: every
        # window below straddles segments and head.
        assert len(store.segments()) == 10
        assert store.head.samples > 0
        for start, end, step in WINDOWS:
            check_raw(store, fleet, start, end)
            for agg in AGGS:
                check_range(store, fleet, start, end, step, agg)
        store.flush(force=True)
        assert len(store.segments()) == 11  # 600 s from an unaligned start: 11 minute windows
        assert all(s.level == 0 for s in store.segments())
        for start, end, step in WINDOWS:
            assert check_raw(store, fleet, start, end).stats.head_samples == 0
            for agg in AGGS:
                check_range(store, fleet, start, end, step, agg)

        compacted = store.compact()
        assert compacted, "the complete 10-minute spans are merged"
        assert all(s.level == 1 for s in compacted)
        for start, end, step in WINDOWS:
            check_raw(store, fleet, start, end)
            for agg in AGGS:
                check_range(store, fleet, start, end, step, agg)


def test_irregular_scrape_times_answer_alike(tmp_path: Path) -> None:
    fleet = make_fleet(samples=400)
    jitter = np.random.default_rng(3).integers(-40, 41, fleet.timestamps.size)
    fleet.timestamps = fleet.timestamps + jitter  # still increasing: 1 s apart, +-40 ms
    with open_store(tmp_path / "s") as store:
        ingest(store, fleet, store.series_ids(fleet.labels))
        for _ in range(2):  # from segments and the head, then from segments alone
            for start, end, _step in WINDOWS:
                check_raw(store, fleet, start, end)
                check_raw(store, fleet, start + 7, end - 7)
            between = int(fleet.timestamps[5]) + 1, int(fleet.timestamps[6])  # between two scrapes
            assert store.query({}, *between).series == []
            assert store.query(fleet.labels[0], *between).series == []
            store.flush(force=True)
            assert store.head.samples == 0


def test_aligned_steps_come_from_directory_aggregates_without_decoding(tmp_path: Path) -> None:
    fleet = make_fleet(samples=300)
    with open_store(tmp_path / "s") as store:
        ingest(store, fleet, store.series_ids(fleet.labels))
        store.flush(force=True)
        start = T0 - T0 % SEGMENT_MS + SEGMENT_MS  # the first complete window
        end = start + 3 * SEGMENT_MS
        for agg in AGGS:
            result = check_range(store, fleet, start, end, SEGMENT_MS, agg)
            assert result.stats.samples_decoded == 0
            assert result.stats.chunks_preaggregated == 3 * len(fleet.labels)
        # The same window cut mid-segment must decode.
        shifted = check_range(store, fleet, start + 1, end, SEGMENT_MS, "avg")
        assert shifted.stats.samples_decoded > 0


def test_window_query_opens_only_the_segments_it_touches(tmp_path: Path) -> None:
    fleet = make_fleet(nodes=1, gpus=1, samples=84 * 12, interval_ms=5_000)
    aligned = T0 - T0 % SEGMENT_MS
    fleet.timestamps = aligned + 5_000 * np.arange(fleet.timestamps.size, dtype=np.int64)
    with open_store(tmp_path / "s") as store:
        ingest(store, fleet, store.series_ids(fleet.labels))
        store.flush(force=True)
        assert len(store.segments()) == 84
        start, end = aligned + 10 * SEGMENT_MS + 30_000, aligned + 11 * SEGMENT_MS + 30_000
        result = store.query({"field": "power_w"}, start, end)
        stats = result.stats
        assert (stats.segments_total, stats.segments_opened, stats.segments_skipped) == (84, 2, 82)
        assert stats.bytes_read > 0
        assert result.series[0].timestamps.size == 12
        # Warm: the directories are cached, so only data blobs are read.
        again = store.query({"field": "power_w"}, start, end).stats
        assert 0 < again.bytes_read < stats.bytes_read
        ranged = store.query_range({"field": "power_w"}, start, end, 10_000, "max").stats
        assert (ranged.segments_total, ranged.segments_opened, ranged.segments_skipped) == (84, 2, 82)


def test_stats_of_several_reads_add_up_but_count_the_stores_segments_once() -> None:
    first = tsdb.QueryStats(10, 2, 8, 100, 50, 5, 3, 1)
    first.add(tsdb.QueryStats(10, 1, 9, 40, 20, 7, 2, 4))
    assert first == tsdb.QueryStats(10, 3, 17, 140, 70, 12, 5, 5)


def test_selectors_by_exact_label_and_by_set(tmp_path: Path) -> None:
    fleet = make_fleet(nodes=3, gpus=2, samples=20)
    with open_store(tmp_path / "s") as store:
        ingest(store, fleet, store.series_ids(fleet.labels))
        window = (T0, T0 + 60_000)

        def labels_of(selector: Mapping[str, str | Collection[str]]) -> list[tuple[str, str, str]]:
            series = store.query(selector, *window).series
            return sorted((s.labels["node"], s.labels["gpu"], s.labels["field"]) for s in series)

        assert labels_of({"node": "n1", "gpu": "0", "field": "util"}) == [("n1", "0", "util")]
        labels = store.query({"node": "n1", "gpu": "0", "field": "util"}, *window).series[0].labels
        with pytest.raises(TypeError):
            labels["node"] = "n2"  # shared by every result: read-only
        assert dict(labels) == {"node": "n1", "gpu": "0", "field": "util"}
        assert labels_of({"node": {"n0", "n2"}, "field": "power_w"}) == [
            ("n0", "0", "power_w"),
            ("n0", "1", "power_w"),
            ("n2", "0", "power_w"),
            ("n2", "1", "power_w"),
        ]
        assert len(labels_of({"field": ["util", "energy_j"]})) == 12
        assert len(labels_of({})) == len(fleet.labels)
        assert labels_of({"node": set()}) == []
        assert labels_of({"rack": "r1"}) == []
        assert labels_of({"node": "n9"}) == []
        not_a_str_value: dict[str, Any] = {"node": 3}
        with pytest.raises(tsdb.InvalidArgumentError, match="selector value for 'node' must be a str or a collection"):
            store.query(not_a_str_value, *window)
        with pytest.raises(ValueError, match=f"empty window: end_ms {T0} <= start_ms {T0}"):
            store.query({}, T0, T0)
        with pytest.raises(ValueError, match="step_ms must be a positive int, got 0"):
            store.query_range({}, T0, T0 + 10, 0, "avg")
        with pytest.raises(ValueError, match="agg must be one of avg, min, max, sum, count, last, rate, got 'median'"):
            store.query_range({}, T0, T0 + 10, 5, "median")


def test_series_without_samples_in_the_window_are_left_out(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        a = store.series_id({"node": "n0", "gpu": "0", "field": "util"})
        b = store.series_id({"node": "n0", "gpu": "1", "field": "util"})
        assert store.series_id({"gpu": "0", "node": "n0", "field": "util"}) == a
        store.append([a], T0, [1.0])
        store.append([a, b], T0 + 10_000, [2.0, 3.0])
        result = store.query({"field": "util"}, T0, T0 + 5_000)
        assert [s.series_id for s in result.series] == [a]
        ranged = store.query_range({"field": "util"}, T0, T0 + 20_000, 5_000, "count")
        assert [s.series_id for s in ranged.series] == [a, b]
        np.testing.assert_array_equal(ranged.series[1].values, [np.nan, np.nan, 1.0, np.nan])


def test_a_query_past_its_limit_stops_with_query_too_large(tmp_path: Path) -> None:
    """Raw: the limit is the samples in the window, from segments and head alike, and a query
    exactly at it answers. Stepped: series times steps, refused before anything is read."""
    fleet = make_fleet(nodes=1, gpus=2, samples=200)  # 6 series, 200 samples each
    with open_store(tmp_path / "s") as store:
        sids = store.series_ids(fleet.labels)
        ingest(store, fleet, sids, upto=120)
        store.flush(force=True)  # the first 120 samples in segments, the rest in the head
        for i in range(120, 200):
            store.append(sids, int(fleet.timestamps[i]), fleet.values[:, i])
        start, end = T0, T0 + 200_000
        for selector, matched in (({}, 6 * 200), ({"gpu": "0", "field": "util"}, 200)):
            assert sum(s.values.size for s in store.query(selector, start, end, max_samples=matched).series) == matched
            with pytest.raises(tsdb.QueryTooLargeError) as raw:
                store.query(selector, start, end, max_samples=matched - 1)
            assert raw.value.limit == matched - 1
            assert raw.value.matched > matched - 1
        steps = 200_000 // 10_000
        assert len(store.query_range({}, start, end, 10_000, "avg", max_cells=6 * steps).series) == 6
        with pytest.raises(tsdb.QueryTooLargeError, match=f"6 series x {steps} steps") as ranged:
            store.query_range({}, start, end, 10_000, "avg", max_cells=6 * steps - 1)
        assert ranged.value.matched == 6 * steps
        # Series named but never written (the catalog keeps them for good) take no share.
        store.series_ids([{"node": "idle", "gpu": str(g), "field": "util"} for g in range(1000)])
        assert len(store.query_range({}, start, end, 10_000, "avg", max_cells=6 * steps).series) == 6

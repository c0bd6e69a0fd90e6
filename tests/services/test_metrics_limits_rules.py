"""The metrics limits as rules, on a fixed clock: which sample times a write may carry, and the
bound on an answer's encoded size."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsdb
from clients import AsyncClient, InvalidValueError
from gpucloud.v1 import metrics_pb2
from services.errors import InvalidArgument
from services.metrics.answer_size import answer_bytes
from services.metrics.batch import GpuFields, LabeledSeries, NodePush, build_batch
from services.metrics.sample_times import MAX_FUTURE_MS, SampleTimes
from services.metrics.samples import SeriesData
from services.metrics.series_limits import SeriesLimits

NOW_MS = 1_700_000_000_000
DAY_MS = 86_400_000
RETENTION_MS = 30 * DAY_MS
MAINTENANCE_MS = 60_000  # the server's default maintenance interval


def _refusal(push_ms: int, *, retention_ms: int | None = RETENTION_MS) -> tuple[str, str]:
    push = NodePush("n1", push_ms, [GpuFields(0, {"power_w": 1.0})])
    with pytest.raises(InvalidArgument) as error:
        build_batch([push], [], SampleTimes(NOW_MS, retention_ms, MAINTENANCE_MS))
    [violation] = error.value.violations
    return violation.field, violation.description


class TestSampleTimes:
    def test_the_window_runs_from_the_retention_edge_to_the_allowed_skew(self) -> None:
        times = SampleTimes(NOW_MS, RETENTION_MS)
        assert (times.oldest_ms, times.newest_ms) == (NOW_MS - RETENTION_MS, NOW_MS + MAX_FUTURE_MS)
        assert times.problem(NOW_MS - RETENTION_MS) is None
        assert times.problem(NOW_MS + MAX_FUTURE_MS) is None
        assert times.problem(NOW_MS - RETENTION_MS - 1) is not None
        assert times.problem(NOW_MS + MAX_FUTURE_MS + 1) is not None

    def test_the_oldest_time_keeps_two_maintenance_intervals_inside_the_retention(self) -> None:
        """The next pass runs up to an interval after the last one ended, and deletes segments
        whose newest sample is older than its clock less the retention: whatever is accepted now
        is at or after the cutoff of a pass two intervals from now."""
        times = SampleTimes(NOW_MS, RETENTION_MS, MAINTENANCE_MS)
        later_pass_cutoff = NOW_MS + 2 * MAINTENANCE_MS - RETENTION_MS
        assert times.oldest_ms == later_pass_cutoff
        assert times.accepts(later_pass_cutoff)
        assert not times.accepts(later_pass_cutoff - 1)
        field, description = _refusal(NOW_MS - RETENTION_MS + MAINTENANCE_MS)
        assert field == "nodes[0].timestamp_ms"
        assert "past what retention keeps (30 days less 2 minutes)" in description

    def test_a_retention_shorter_than_the_margin_accepts_nothing_older_than_now(self) -> None:
        times = SampleTimes(NOW_MS, 30_000, MAINTENANCE_MS)
        assert times.oldest_ms == NOW_MS

    def test_a_sample_past_the_retention_names_its_age_the_retention_and_the_unit(self) -> None:
        field, description = _refusal(NOW_MS - 45 * DAY_MS)
        assert field == "nodes[0].timestamp_ms"
        assert description == (
            f"{NOW_MS - 45 * DAY_MS} is 45 days old, past what retention keeps (30 days less 2 minutes): "
            "times are milliseconds since the epoch"
        )

    @pytest.mark.parametrize(
        ("value", "unit"),
        [(NOW_MS // 1000, "seconds"), (NOW_MS * 1000, "microseconds"), (NOW_MS * 1_000_000, "nanoseconds")],
    )
    def test_a_time_in_another_unit_is_named(self, value: int, unit: str) -> None:
        _, description = _refusal(value)
        assert description.endswith(f"times are milliseconds since the epoch; this one looks like {unit}")
        assert len(description) <= 160  # arrives whole (services/errors.py)

    def test_without_a_retention_an_old_sample_is_kept_and_only_the_future_is_bounded(self) -> None:
        batch = build_batch([NodePush("n1", 1, [GpuFields(0, {"p": 1.0})])], [], SampleTimes(NOW_MS, None))
        assert batch.sample_count == 1
        _, description = _refusal(NOW_MS + 10 * 60_000, retention_ms=None)
        assert description.startswith(
            f"{NOW_MS + 10 * 60_000} is 10 minutes ahead of the server's clock (at most 5 minutes)"
        )

    def test_columnar_series_name_the_first_sample_outside_the_window(self) -> None:
        ts = np.array([NOW_MS - 31 * DAY_MS, NOW_MS - 1], dtype=np.int64)
        series = LabeledSeries({"node": "n1", "field": "f"}, ts, np.array([1.0, 2.0]))
        with pytest.raises(InvalidArgument) as error:
            build_batch([], [series], SampleTimes(NOW_MS, RETENTION_MS))
        assert [v.field for v in error.value.violations] == ["series[0].timestamps_ms[0]"]


class TestAnswerSize:
    @settings(max_examples=60, deadline=None)
    @given(
        st.lists(
            st.tuples(
                st.dictionaries(st.text(min_size=1, max_size=12), st.text(max_size=40), min_size=1, max_size=8),
                st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.floats()), max_size=20),
            ),
            max_size=8,
        )
    )
    def test_the_estimate_is_never_below_the_encoded_size(
        self, series: list[tuple[dict[str, str], list[tuple[int, float]]]]
    ) -> None:
        data = [
            SeriesData(
                labels,
                np.array([t for t, _ in points], dtype=np.int64),
                np.array([v for _, v in points], dtype=np.float64),
            )
            for labels, points in series
        ]
        stats = metrics_pb2.QueryStats(**dict.fromkeys(metrics_pb2.QueryStats.DESCRIPTOR.fields_by_name, -1))
        response = metrics_pb2.QueryResponse(
            series=[
                metrics_pb2.Series(labels=s.labels, timestamps_ms=s.timestamps_ms.tolist(), values=s.values.tolist())
                for s in data
            ],
            stats=stats,
        )
        assert answer_bytes(data) >= response.ByteSize()

    def test_the_estimate_of_usual_series_is_within_a_third_of_the_encoded_size(self) -> None:
        data = [
            SeriesData(
                {"node": f"node-{n:05d}", "gpu": str(g), "field": "power_w"},
                np.arange(NOW_MS, NOW_MS + 10 * 10_000, 10_000, dtype=np.int64),
                np.full(10, 412.5),
            )
            for n in range(50)
            for g in range(8)
        ]
        response = metrics_pb2.QueryResponse(
            series=[
                metrics_pb2.Series(labels=s.labels, timestamps_ms=s.timestamps_ms.tolist(), values=s.values.tolist())
                for s in data
            ]
        )
        assert response.ByteSize() <= answer_bytes(data) <= response.ByteSize() * 4 // 3 + 200


def test_series_limits_under_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        SeriesLimits(per_node=0)


def test_the_clients_receive_limit_must_be_a_positive_number_of_bytes() -> None:
    # Any: values of the wrong type on purpose, as an untyped caller might pass them.
    bad_values: list[Any] = [0, -1, 1.5, True]
    for bad in bad_values:
        with pytest.raises(InvalidValueError):
            AsyncClient("127.0.0.1:1", "token", max_receive_bytes=bad)


def test_the_default_series_limit_bounds_the_heads_memory(tmp_path: Path) -> None:
    """At 10 s pushes a full head holds three hours of each series (a two-hour window and the
    hour after it before the window is sealed). Measured per series, with exactly one head row
    each, the default total limit at twice that (the head adds rows in doublings) stays within
    the 7 GiB docs/api.md states."""
    series, step_ms, window_ms = 1024, 10_000, 2 * 3_600_000
    start = 1_700_000_000_000 // window_ms * window_ms
    tracemalloc.start()
    try:
        with tsdb.Store.open(tmp_path / "tsdb", fsync_interval_ms=1000) as store:
            before = tracemalloc.get_traced_memory()[0]
            labels = [
                {"node": f"node-{n:05d}", "gpu": str(n % 8), "field": f"f{k}"} for n in range(128) for k in range(8)
            ]
            sids = store.series_ids(labels)  # one call: the head has exactly one row per series
            values = np.ones(series)
            for push in range(3 * 3_600_000 // step_ms):
                store.append(sids, start + push * step_ms, values)
            per_series = (tracemalloc.get_traced_memory()[0] - before) / series
    finally:
        tracemalloc.stop()
    assert per_series * 2 * SeriesLimits().total <= 7 * 2**30, per_series

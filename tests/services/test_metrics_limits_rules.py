"""The metrics limits as rules, on a fixed clock: which sample times a write may carry, and the
bound on an answer's encoded size."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _refusal(push_ms: int, *, retention_ms: int | None = RETENTION_MS) -> tuple[str, str]:
    push = NodePush("n1", push_ms, [GpuFields(0, {"power_w": 1.0})])
    with pytest.raises(InvalidArgument) as error:
        build_batch([push], [], now_ms=NOW_MS, retention_ms=retention_ms)
    [violation] = error.value.violations
    return violation.field, violation.description


class TestSampleTimes:
    def test_the_window_runs_from_the_retention_edge_to_the_allowed_skew(self) -> None:
        times = SampleTimes(NOW_MS, RETENTION_MS)
        assert (times.oldest_ms, times.newest_ms) == (NOW_MS - RETENTION_MS, NOW_MS + MAX_FUTURE_MS)
        assert times.problem(NOW_MS - RETENTION_MS) is None and times.problem(NOW_MS + MAX_FUTURE_MS) is None
        assert times.problem(NOW_MS - RETENTION_MS - 1) is not None
        assert times.problem(NOW_MS + MAX_FUTURE_MS + 1) is not None

    def test_a_sample_past_the_retention_names_its_age_the_retention_and_the_unit(self) -> None:
        field, description = _refusal(NOW_MS - 45 * DAY_MS)
        assert field == "nodes[0].timestamp_ms"
        assert description == (
            f"{NOW_MS - 45 * DAY_MS} is 45 days old, past the metrics retention of 30 days: "
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
        batch = build_batch([NodePush("n1", 1, [GpuFields(0, {"p": 1.0})])], [], now_ms=NOW_MS, retention_ms=None)
        assert batch.sample_count == 1
        _, description = _refusal(NOW_MS + 10 * 60_000, retention_ms=None)
        assert description.startswith(
            f"{NOW_MS + 10 * 60_000} is 10 minutes ahead of the server's clock (at most 5 minutes)"
        )

    def test_columnar_series_name_the_first_sample_outside_the_window(self) -> None:
        ts = np.array([NOW_MS - 31 * DAY_MS, NOW_MS - 1], dtype=np.int64)
        series = LabeledSeries({"node": "n1", "field": "f"}, ts, np.array([1.0, 2.0]))
        with pytest.raises(InvalidArgument) as error:
            build_batch([], [series], now_ms=NOW_MS, retention_ms=RETENTION_MS)
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
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidValueError):
            AsyncClient("127.0.0.1:1", "token", max_receive_bytes=bad)  # type: ignore[arg-type]

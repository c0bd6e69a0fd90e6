"""The metrics rules: write batches, selectors and windows, tenant holds, and stepped reads of holds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.errors import InvalidArgument
from services.metrics.batch import MAX_FUTURE_MS, GpuFields, LabeledSeries, NodePush, build_batch
from services.metrics.holds import HoldRecord, envelope, hold_intervals, merge, within
from services.metrics.ranges import combine, part_aggregations, plan_range
from services.metrics.sample_times import SampleTimes
from services.metrics.selection import (
    MAX_STEPS,
    Aggregation,
    Selector,
    Window,
    check_selector,
    check_step,
    check_window,
    tsdb_selector,
)
from services.validation import Violations

NOW_MS = 1_700_000_000_000


def _series(labels: dict[str, str], ts: list[int], values: list[float]) -> LabeledSeries:
    return LabeledSeries(labels, np.array(ts, dtype=np.int64), np.array(values, dtype=np.float64))


def _bad_fields(error: pytest.ExceptionInfo[InvalidArgument]) -> list[str]:
    return [v.field for v in error.value.violations]


# Write batches -----------------------------------------------------------------------------------


class TestBuildBatch:
    def test_a_node_push_becomes_one_series_per_gpu_and_field(self) -> None:
        """Two GPUs with two fields each make four series labelled node, gpu, field."""
        push = NodePush("n1", NOW_MS, [GpuFields(0, {"power_w": 400.0, "temp_c": 60.0}), GpuFields(1, {"power_w": 1})])
        batch = build_batch([push], [], SampleTimes(NOW_MS))
        labels = sorted((r.labels["gpu"], r.labels["field"]) for r in batch.runs)
        assert labels == [("0", "power_w"), ("0", "temp_c"), ("1", "power_w")]
        assert {r.labels["node"] for r in batch.runs} == {"n1"}
        assert batch.sample_count == 3
        assert batch.node_paths == {"n1": "nodes[0].node_id"}

    def test_pushes_and_series_of_one_series_concatenate_in_order(self) -> None:
        """Samples of one series from two pushes and a columnar entry join into one ascending run."""
        pushes = [
            NodePush("n1", NOW_MS - 20, [GpuFields(0, {"p": 1.0})]),
            NodePush("n1", NOW_MS - 10, [GpuFields(0, {"p": 2.0})]),
        ]
        extra = _series({"node": "n1", "gpu": "0", "field": "p"}, [NOW_MS - 5, NOW_MS], [3.0, 4.0])
        batch = build_batch(pushes, [extra], SampleTimes(NOW_MS))
        assert len(batch.runs) == 1
        assert batch.runs[0].timestamps_ms.tolist() == [NOW_MS - 20, NOW_MS - 10, NOW_MS - 5, NOW_MS]
        assert batch.runs[0].values.tolist() == [1.0, 2.0, 3.0, 4.0]
        run = batch.runs[0]
        fields = [run.field_at(i) for i in range(4)]
        assert fields == [
            "nodes[0].timestamp_ms",
            "nodes[1].timestamp_ms",
            "series[0].timestamps_ms[0]",
            "series[0].timestamps_ms[1]",
        ]
        assert run.field_of_time(NOW_MS - 5) == "series[0].timestamps_ms[0]"
        assert run.field_of_time(NOW_MS - 7) == "nodes[0].timestamp_ms"

    def test_a_later_entry_that_goes_back_in_time_is_named(self) -> None:
        """A second push for the same series at an earlier time names the second push's timestamp."""
        pushes = [
            NodePush("n1", NOW_MS, [GpuFields(0, {"p": 1.0})]),
            NodePush("n1", NOW_MS - 1, [GpuFields(0, {"p": 2.0})]),
        ]
        with pytest.raises(InvalidArgument) as error:
            build_batch(pushes, [], SampleTimes(NOW_MS))
        assert _bad_fields(error) == ["nodes[1].timestamp_ms"]

    def test_every_bad_field_of_a_push_is_named_at_once(self) -> None:
        """Bad node id, future timestamp, GPU index, duplicate GPU, field name and NaN value all appear."""
        push = NodePush(
            "Bad_Node",
            NOW_MS + MAX_FUTURE_MS + 1,
            [GpuFields(64, {"ok": 1.0}), GpuFields(1, {"Bad-Name": 1.0}), GpuFields(1, {"x": math.nan})],
        )
        with pytest.raises(InvalidArgument) as error:
            build_batch([push], [], SampleTimes(NOW_MS))
        assert error.value.reason == "INVALID_FIELD"
        assert _bad_fields(error) == [
            "nodes[0].node_id",
            "nodes[0].timestamp_ms",
            "nodes[0].gpus[0].gpu_index",
            "nodes[0].gpus[1].fields['Bad-Name']",
            "nodes[0].gpus[2].gpu_index",
            "nodes[0].gpus[2].fields['x']",
        ]

    @pytest.mark.parametrize(
        ("labels", "ts", "values", "field"),
        [
            ({"field": "p"}, [1], [1.0], "series[0].labels['node']"),
            ({"node": "n1"}, [1], [1.0], "series[0].labels['field']"),
            ({"node": "n1", "field": "p", "gpu": "07"}, [1], [1.0], "series[0].labels['gpu']"),
            ({"node": "n1", "field": "p", "gpu": "64"}, [1], [1.0], "series[0].labels['gpu']"),
            # Every node has GPUs 0-7 (registration's rule), so 8 names no GPU at all.
            ({"node": "n1", "field": "p", "gpu": "8"}, [1], [1.0], "series[0].labels['gpu']"),
            # Longer than int() converts (4,300 digits): refused as a bad index, not a crash.
            ({"node": "n1", "field": "p", "gpu": "0" * 4301}, [1], [1.0], "series[0].labels['gpu']"),
            ({"node": "n1", "field": "p", "Rack": "r1"}, [1], [1.0], "series[0].labels['Rack']"),
            ({"node": "n1", "field": "p"}, [], [], "series[0].timestamps_ms"),
            ({"node": "n1", "field": "p"}, [1, 2], [1.0], "series[0].values"),
            ({"node": "n1", "field": "p"}, [1, 3, 3], [1.0, 2.0, 3.0], "series[0].timestamps_ms[2]"),
            ({"node": "n1", "field": "p"}, [1, 2], [1.0, math.inf], "series[0].values[1]"),
            ({"node": "n1", "field": "p"}, [0, 2], [1.0, 2.0], "series[0].timestamps_ms[0]"),
        ],
    )
    def test_a_bad_columnar_series_names_its_field(
        self, labels: dict[str, str], ts: list[int], values: list[float], field: str
    ) -> None:
        """Missing or malformed labels, empty or unpaired arrays, disorder, infinities and bad times."""
        with pytest.raises(InvalidArgument) as error:
            build_batch([], [_series(labels, ts, values)], SampleTimes(NOW_MS))
        assert field in _bad_fields(error)

    def test_a_push_for_a_gpu_no_node_has_is_refused(self) -> None:
        """GPU index 8 on an 8-GPU node is INVALID_ARGUMENT naming that GPU's index and the range."""
        push = NodePush("n1", NOW_MS, [GpuFields(7, {"p": 1.0}), GpuFields(8, {"p": 1.0})])
        with pytest.raises(InvalidArgument) as error:
            build_batch([push], [], SampleTimes(NOW_MS))
        assert _bad_fields(error) == ["nodes[0].gpus[1].gpu_index"]
        assert "must be 0-7" in str(error.value.violations[0].description)

    def test_an_empty_write_is_refused(self) -> None:
        """A request with neither pushes nor series is INVALID_ARGUMENT."""
        with pytest.raises(InvalidArgument):
            build_batch([], [], SampleTimes(NOW_MS))

    def test_node_level_series_need_no_gpu_label(self) -> None:
        """A columnar series without a gpu label, with an extra label, is accepted as given."""
        labels = {"node": "n1", "field": "nic_rx_bytes", "port": "eth0"}
        batch = build_batch([], [_series(labels, [1, 2], [5.0, 6.0])], SampleTimes(NOW_MS))
        assert batch.runs[0].labels == labels
        assert batch.node_paths == {"n1": "series[0].labels['node']"}


# Selectors, windows, steps -------------------------------------------------------------------------


class TestSelection:
    def test_a_well_formed_read_has_no_violations(self) -> None:
        """Node ids, GPU indexes, field names, a window and a step in bounds pass."""
        v = Violations()
        check_selector(v, Selector(("n1", "n2"), (0, 7), ("power_w",)))
        check_window(v, Window(0, 60_000))
        check_step(v, Window(0, 60_000), 1000)
        assert v.items == []

    def test_every_bad_part_of_a_read_is_named(self) -> None:
        """Bad node id, GPU index, field name, reversed window and a too-fine step are each named."""
        v = Violations()
        check_selector(v, Selector(("N1",), (64,), ("power-w",)))
        check_window(v, Window(10, 10))
        check_step(v, Window(0, MAX_STEPS + 1), 1)
        assert [i.field for i in v.items] == [
            "selector.node_ids[0]",
            "selector.gpu_indexes[0]",
            "selector.fields[0]",
            "end_ms",
            "step_ms",
        ]

    @pytest.mark.parametrize("window", [Window(-1, 5), Window(0, 2**62)])
    def test_times_outside_the_calendar_are_refused(self, window: Window) -> None:
        """Negative times and times past year 9999 are refused."""
        v = Violations()
        check_window(v, window)
        assert v.items

    def test_a_zero_step_is_refused(self) -> None:
        v = Violations()
        check_step(v, Window(0, 10), 0)
        assert [i.field for i in v.items] == ["step_ms"]

    def test_the_tsdb_matcher_narrows_to_given_nodes_and_omits_empty_lists(self) -> None:
        """Empty selector lists match everything; given nodes replace the selector's."""
        selector = Selector(("n1",), (0, 1), ())
        assert tsdb_selector(selector, None) == {"node": frozenset({"n1"}), "gpu": frozenset({"0", "1"})}
        assert tsdb_selector(selector, ["n2"]) == {"node": frozenset({"n2"}), "gpu": frozenset({"0", "1"})}
        assert tsdb_selector(Selector(), None) == {}
        with pytest.raises(ValueError, match="node_ids is empty"):
            tsdb_selector(selector, [])


# Holds ---------------------------------------------------------------------------------------------


class TestHolds:
    def test_holds_come_from_starts_and_stops_and_an_open_one_lasts_until_now(self) -> None:
        """Two closed holds and an open one on one node; a stop without a start grants nothing."""
        records = [
            HoldRecord("a1", "n1", start_us=1_000_000, stop_us=2_000_000),
            HoldRecord("a2", "n1", start_us=5_000_500, stop_us=None),
            HoldRecord("a3", "n2", start_us=None, stop_us=9_000_000),
        ]
        held = hold_intervals(records, now_us=7_000_000)
        assert held == {"n1": ((1000, 2000), (5001, 7000))}

    def test_microseconds_round_so_that_exactly_the_held_instants_are_kept(self) -> None:
        """A sample at ms t is visible iff t*1000 lies in [start_us, stop_us)."""
        (interval,) = hold_intervals([HoldRecord("a", "n", 1_000_001, 1_999_999)], now_us=0)["n"]
        assert interval == (1001, 2000)

    def test_overlapping_and_touching_holds_merge(self) -> None:
        assert merge([(5, 7), (1, 3), (3, 4), (6, 9), (10, 10)]) == ((1, 4), (5, 9))

    def test_within_and_envelope(self) -> None:
        assert within([(0, 10), (20, 30), (40, 50)], Window(5, 25)) == ((5, 10), (20, 25))
        assert envelope({"a": [(5, 10)], "b": [(1, 3), (20, 25)]}) == Window(1, 25)
        assert envelope({}) is None


# Stepped reads of holds ------------------------------------------------------------------------------


class TestPlanRange:
    def test_whole_steps_are_runs_and_edges_are_partial(self) -> None:
        """Steps of 10 over [0, 100); a hold [15, 62) reads [20, 60) whole and 10s and 60s in part."""
        plan = plan_range(Window(0, 100), 10, [(15, 62)])
        assert plan.steps.tolist() == [10, 20, 30, 40, 50, 60]
        assert plan.runs == (Window(20, 60),)
        assert [(p.start_ms, p.parts) for p in plan.partials] == [(10, ((15, 20),)), (60, ((60, 62),))]

    def test_a_step_with_two_holds_is_one_partial_with_two_parts(self) -> None:
        plan = plan_range(Window(0, 30), 10, [(0, 12), (15, 30)])
        assert plan.steps.tolist() == [0, 10, 20]
        assert plan.runs == (Window(0, 10), Window(20, 30))
        assert [(p.start_ms, p.parts) for p in plan.partials] == [(10, ((10, 12), (15, 20)))]

    def test_the_short_last_step_is_whole_when_held_to_the_window_end(self) -> None:
        plan = plan_range(Window(0, 25), 10, [(0, 25)])
        assert plan.runs == (Window(0, 25),)
        assert plan.partials == ()

    def test_averages_of_several_parts_read_sums_and_counts(self) -> None:
        assert part_aggregations(Aggregation.AVG, 2) == (Aggregation.SUM, Aggregation.COUNT)
        assert part_aggregations(Aggregation.AVG, 1) == (Aggregation.AVG,)
        assert part_aggregations(Aggregation.MAX, 3) == (Aggregation.MAX,)

    @pytest.mark.parametrize(
        ("aggregation", "expected"),
        [
            (Aggregation.SUM, 7.0),
            (Aggregation.COUNT, 7.0),
            (Aggregation.MIN, 3.0),
            (Aggregation.MAX, 4.0),
            (Aggregation.LAST, 4.0),
        ],
    )
    def test_parts_combine_per_aggregation(self, aggregation: Aggregation, expected: float) -> None:
        """The later part's value is 4, the earlier's 3; an empty middle part is ignored."""
        parts = ((0, 2), (3, 4), (5, 9))
        assert combine(aggregation, parts, [[3.0], [math.nan], [4.0]]) == expected

    def test_an_average_of_parts_is_their_total_over_their_count(self) -> None:
        assert combine(Aggregation.AVG, ((0, 2), (5, 9)), [[6.0, 2.0], [10.0, 3.0]]) == pytest.approx(16 / 5)

    def test_rates_of_parts_weigh_by_length_and_empty_parts_count_for_nothing(self) -> None:
        parts = ((0, 10), (20, 50), (60, 70))
        assert combine(Aggregation.RATE, parts, [[1.0], [2.0], [math.nan]]) == pytest.approx((10 + 60) / 40)
        assert math.isnan(combine(Aggregation.SUM, parts, [[math.nan]] * 3))


def _reference(aggregation: Aggregation, values: np.ndarray) -> float:
    """What a step's aggregate over exactly these samples is (NaN when there are none)."""
    if len(values) == 0:
        return math.nan
    return {
        Aggregation.AVG: lambda: float(values.mean()),
        Aggregation.MIN: lambda: float(values.min()),
        Aggregation.MAX: lambda: float(values.max()),
        Aggregation.SUM: lambda: float(values.sum()),
        Aggregation.COUNT: lambda: float(len(values)),
        Aggregation.LAST: lambda: float(values[-1]),
    }[aggregation]()


@settings(max_examples=150, deadline=None)
@given(
    present=st.lists(st.booleans(), min_size=200, max_size=200),
    cuts=st.lists(st.integers(0, 200), unique=True, min_size=2, max_size=8),
    step=st.integers(1, 50),
    aggregation=st.sampled_from([a for a in Aggregation if a is not Aggregation.RATE]),
)
def test_a_planned_read_equals_aggregating_the_clipped_samples(
    present: list[bool], cuts: list[int], step: int, aggregation: Aggregation
) -> None:
    """For any samples, holds and step, reading whole steps and combining partial parts gives, at
    every visible step, the aggregate of exactly the samples inside the holds."""
    ts = np.flatnonzero(present).astype(np.int64)
    values = (ts * 7 % 13).astype(np.float64) - 6
    bounds = sorted(cuts)
    holds = merge(zip(bounds[::2], bounds[1::2], strict=False))
    window = Window(0, 200)
    plan = plan_range(window, step, holds)

    def read(start: int, end: int, agg: Aggregation) -> float:
        lo, hi = np.searchsorted(ts, [start, end])
        return _reference(agg, values[lo:hi])

    got: dict[int, float] = {}
    for run in plan.runs:
        for s in range(run.start_ms, run.end_ms, step):
            got[s] = read(s, min(s + step, run.end_ms), aggregation)
    for partial in plan.partials:
        aggs = part_aggregations(aggregation, len(partial.parts))
        got[partial.start_ms] = combine(
            aggregation, partial.parts, [[read(s, e, a) for a in aggs] for s, e in partial.parts]
        )
    assert sorted(got) == plan.steps.tolist()

    inside = np.zeros(len(ts), dtype=bool)  # the oracle: the samples inside a hold
    for a, b in holds:
        inside |= (ts >= a) & (ts < b)
    clipped_ts, clipped_values = ts[inside], values[inside]
    for s in range(0, 200, step):
        in_step = clipped_values[(clipped_ts >= s) & (clipped_ts < s + step)]
        covered = any(a < s + step and b > s for a, b in holds)
        if not covered:
            assert s not in got
            continue
        expected = _reference(aggregation, in_step)
        assert (math.isnan(expected) and math.isnan(got[s])) or got[s] == pytest.approx(expected)

"""The per-GPU union and intersection the benchmark times, against the interval algebra."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.engine import connect, intersection_seconds, union_seconds
from accounting.intervals import Interval, intersect, total
from accounting.union import IntervalsError

rows = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 50)), max_size=25)


def _table(items: list[tuple[int, int, int]]) -> pa.Table:
    return pa.table(
        {
            "gpu_id": pa.array([g for g, _, _ in items], pa.int64()),
            "start_us": pa.array([s for _, s, _ in items], pa.int64()),
            "end_us": pa.array([e for _, _, e in items], pa.int64()),
        }
    )


def _by_gpu(items: list[tuple[int, int, int]]) -> dict[int, list[Interval]]:
    found: dict[int, list[Interval]] = defaultdict(list)
    for gpu, begin, end in items:
        found[gpu].append(Interval(begin, end))
    return found


@settings(max_examples=25, deadline=None)
@given(rows, rows)
def test_union_and_intersection_match_the_interval_algebra(
    usage: list[tuple[int, int, int]], outages: list[tuple[int, int, int]]
) -> None:
    """Empty and reversed intervals cover nothing; a GPU reported twice is counted once."""
    got = union_seconds(_table(usage))
    assert dict(zip(got["gpu_id"].to_pylist(), got["union_us"].to_pylist(), strict=True)) == {
        gpu: total(spans) for gpu, spans in _by_gpu(usage).items()
    }
    credit = intersection_seconds(_table(usage), _table(outages))
    used = _by_gpu(usage)
    expected = {
        gpu: sum(i.length for i in intersect(used.get(gpu, []), down)) for gpu, down in _by_gpu(outages).items()
    }
    assert dict(zip(credit["gpu_id"].to_pylist(), credit["intersection_us"].to_pylist(), strict=True)) == expected


def test_union_seconds_takes_a_duckdb_relation() -> None:
    con = connect()
    relation = con.sql(
        "SELECT * FROM (VALUES (1, 0, 10), (1, 5, 20), (1, 5, 20), (2, 3, 4)) t(gpu_id, start_us, end_us)"
    )
    result = union_seconds(relation)
    assert result.to_pylist() == [{"gpu_id": 1, "union_us": 20}, {"gpu_id": 2, "union_us": 1}]


def test_ids_of_any_type_and_range_are_numbered_and_given_back() -> None:
    """String ids, sparse integers (numbered densely) and negative ones come back as given."""
    strings = pa.table({"gpu_id": ["GPU-b", "GPU-a", "GPU-b"], "start_us": [0, 5, 5], "end_us": [10, 7, 20]})
    assert union_seconds(strings).to_pylist() == [
        {"gpu_id": "GPU-a", "union_us": 2},
        {"gpu_id": "GPU-b", "union_us": 20},
    ]
    sparse = _table([(2**62, 0, 10), (-(2**62), 3, 4), (7, 0, 1), (2**62, 5, 15)])
    assert union_seconds(sparse).to_pylist() == [
        {"gpu_id": -(2**62), "union_us": 1},
        {"gpu_id": 7, "union_us": 1},
        {"gpu_id": 2**62, "union_us": 15},
    ]


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(-(2**61), 2**61), st.integers(-(2**61), 2**61)),
        max_size=12,
    )
)
def test_times_too_far_apart_for_63_bits_take_the_wide_key(items: list[tuple[int, int, int]]) -> None:
    """Times 2**62 apart need a 63-bit time part: with the GPU number the key is a HUGEINT."""
    got = union_seconds(_table(items))
    assert dict(zip(got["gpu_id"].to_pylist(), got["union_us"].to_pylist(), strict=True)) == {
        gpu: total(spans) for gpu, spans in _by_gpu(items).items()
    }
    credit = intersection_seconds(_table(items), _table([(1, -(2**61), 2**61)]))
    assert credit.to_pylist() == [{"gpu_id": 1, "intersection_us": total(_by_gpu(items).get(1, []))}]


def test_bad_intervals_are_refused() -> None:
    with pytest.raises(IntervalsError, match="null"):
        union_seconds(pa.table({"gpu_id": [1, None], "start_us": [0, 1], "end_us": [2, 3]}))
    with pytest.raises(IntervalsError, match="columns"):
        union_seconds(pa.table({"gpu": [1], "start_us": [0], "end_us": [2]}))
    empty = union_seconds(_table([]))
    assert empty.num_rows == 0
    assert empty.column_names == ["gpu_id", "union_us"]

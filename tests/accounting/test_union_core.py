"""The per-GPU union and intersection the benchmark times, against the interval algebra."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.engine import connect, intersection_seconds, union_seconds
from accounting.intervals import Interval, intersect, total

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

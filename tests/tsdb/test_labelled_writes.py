"""Writes by labels: the series a batch would create are registered only when the whole batch is
taken. A refused batch leaves the catalog file byte for byte as it was; counts create nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tsdb
from tests.tsdb.helpers import T0

OLD = {"node": "n0", "field": "power_w"}
WINDOW = (T0 - 10**9, T0 + 10**9)


def fresh(count: int) -> list[dict[str, str]]:
    return [{"node": "n0", "field": f"f{i}"} for i in range(count)]


def open_store(path: Path) -> tsdb.Store:
    return tsdb.Store.open(path, segment_ms=60_000, fsync_interval_ms=0)


def catalog(path: Path) -> bytes:
    return (path / "catalog.tsc").read_bytes()


def test_a_batch_refused_for_order_registers_none_of_its_new_series(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_store(path) as store:
        assert store.append_labelled([OLD], [0], T0 + 10_000, [1.0]) == 1
        before = catalog(path)
        labels = [OLD, *fresh(1000)]
        series = np.arange(len(labels))
        times = np.full(len(labels), T0 + 20_000)
        times[0] = T0 + 5_000  # older than OLD's newest sample
        with pytest.raises(tsdb.OutOfOrderError) as error:
            store.append_labelled(labels, series, times, np.ones(len(labels)))
        assert error.value.labels == OLD
        assert store.labels(error.value.series_id) == OLD
        assert catalog(path) == before
        assert store.series_count({}) == 1
        assert store.series_count({"field": [labels["field"] for labels in fresh(3)]}) == 0
        assert [s.labels for s in store.query({}, *WINDOW).series] == [OLD]
    with open_store(path) as store:
        assert store.series_count({}) == 1
        assert store.series_id({"node": "n1"}) == 1  # no id was spent on the refused series


def test_a_new_series_behind_the_sealed_boundary_is_refused_and_named(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_store(path) as store:
        store.append_labelled([OLD], [0, 0], [T0, T0 + 120_000], [1.0, 2.0])
        store.flush(force=True)
        before = catalog(path)
        with pytest.raises(tsdb.OutOfOrderError) as error:
            store.append_labelled([fresh(1)[0], fresh(2)[1]], [0, 1], [T0 + 200_000, T0 + 1_000], [1.0, 2.0])
        assert error.value.behind_boundary
        assert error.value.series_id == -1
        assert error.value.labels == fresh(2)[1]
        assert "new series" in str(error.value)
        assert catalog(path) == before
        assert store.series_count({}) == 1


def test_an_accepted_batch_registers_its_new_series_durably(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_store(path) as store:
        store.append_labelled([OLD], [0], T0, [1.0])
        labels = [*fresh(2), OLD, fresh(2)[0]]  # a label set may be named twice
        added = store.append_labelled(labels, [0, 0, 1, 2, 3], [T0 + 1, T0 + 2, T0 + 1, T0 + 1, T0 + 3], np.ones(5))
        assert added == 5
        ids = {s.labels["field"]: s.series_id for s in store.query({}, *WINDOW).series}
        assert ids == {"power_w": 0, "f0": 1, "f1": 2}
        assert store.series_count({}) == 3
        assert store.series_count({"node": "n0"}) == 3
        assert store.series_count({"field": ["f0", "f1"]}) == 2
        assert store.series_count({"node": "n9"}) == 0
    with open_store(path) as store:
        got = {s.labels["field"]: s.timestamps.tolist() for s in store.query({}, *WINDOW).series}
        assert got == {"power_w": [T0, T0 + 1], "f0": [T0 + 1, T0 + 2, T0 + 3], "f1": [T0 + 1]}


def test_a_resent_batch_of_new_series_after_they_were_sealed_adds_nothing(tmp_path: Path) -> None:
    """A retry of a batch that created series, once its samples are sealed: the series exist, the
    samples are repeats, nothing is added and nothing registered."""
    path = tmp_path / "s"
    with open_store(path) as store:
        labels = fresh(3)
        args = (labels, [0, 1, 2, 0], [T0, T0, T0, T0 + 1_000], [1.0, 2.0, 3.0, 4.0])
        assert store.append_labelled(*args) == 4
        store.flush(force=True)
        before = catalog(path)
        assert store.append_labelled(*args) == 0
        assert catalog(path) == before
        # A resend with one more new series: that one is behind the boundary, so all is refused.
        with pytest.raises(tsdb.OutOfOrderError):
            store.append_labelled([*labels, {"node": "n0", "field": "late"}], [0, 1, 2, 3], T0, np.ones(4))
        assert catalog(path) == before
        assert store.series_count({}) == 3


def test_bad_arguments_change_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_store(path) as store:
        before = catalog(path)
        for labels, series, values in (
            (fresh(2), [0], [1.0]),  # labels[1] has no sample
            (fresh(1), [1], [1.0]),  # no labels[1]
            (fresh(1), [-1], [1.0]),
            (fresh(1), [0.0], [1.0]),
            (fresh(1), [0, 0], [1.0]),  # one value for two samples
            ([{}], [0], [1.0]),
        ):
            with pytest.raises(tsdb.InvalidArgumentError):
                store.append_labelled(labels, series, T0, values)
        assert catalog(path) == before
        assert store.series_count({}) == 0


def test_counts_create_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_store(path) as store:
        store.series_id(OLD)
        before = catalog(path)
        assert store.series_count({"node": "n0"}) == 1
        assert store.series_count({"node": "n0", "field": "new"}) == 0
        assert catalog(path) == before


def test_series_ids_still_creates_at_once(tmp_path: Path) -> None:
    """series_ids + append: the series exist as soon as they are asked for, whatever the append."""
    path = tmp_path / "s"
    with open_store(path) as store:
        (a,) = store.series_ids([OLD])
        store.append([a], T0 + 10, [1.0])
        (b,) = store.series_ids([{"node": "n1"}])
        with pytest.raises(tsdb.OutOfOrderError):
            store.append([a, b], [T0, T0 + 10], [1.0, 1.0])
        assert store.series_count({}) == 2


class Refused(Exception):
    pass


def test_admit_sees_each_new_series_once_and_may_refuse_the_batch(tmp_path: Path) -> None:
    path = tmp_path / "s"
    seen: list[list[int]] = []

    def admit(new: list[int]) -> None:
        seen.append(new)
        assert store.series_count({}) == 1  # the store may be read, and holds none of them yet
        raise Refused

    with open_store(path) as store:
        store.append_labelled([OLD], [0], T0, [1.0])
        before = catalog(path)
        labels = [fresh(2)[1], OLD, fresh(2)[0], fresh(2)[1]]
        with pytest.raises(Refused):
            store.append_labelled(labels, [0, 1, 2, 3], T0 + 1, np.ones(4), admit=admit)
        assert seen == [[0, 2]]
        assert catalog(path) == before
        assert store.series_count({}) == 1
        store.append_labelled([OLD], [0], T0 + 2, [1.0], admit=admit)  # nothing new: not called
        assert seen == [[0, 2]]

"""Series ids survive a damaged catalog: a torn tail costs only the torn record, a record with a
wrong first id costs only itself and what follows, and an id that a segment or the WAL refers to
is never handed to another series, whatever the catalog lost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tsdb
from tests.tsdb.helpers import T0
from tsdb import framing
from tsdb.catalog import HEADER

WINDOW = (T0, T0 + 10**6)


def two_series_store(path: Path, *, seal: bool) -> None:
    """Series a and b, each created by its own catalog record, with five samples each."""
    with tsdb.Store.open(path, fsync_interval_ms=0) as store:
        a = store.series_id({"node": "a"})
        b = store.series_id({"node": "b"})
        for k in range(5):
            store.append(np.array([a, b]), T0 + k * 10_000, np.array([1.0, 2.0]))
        if seal:
            store.flush(force=True)


def catalog_records(path: Path) -> list[tuple[int, int]]:
    """(offset, end) of every intact catalog record."""
    data = (path / "catalog.tsc").read_bytes()
    end = framing.ScanEnd(0, False, None)
    return [(offset, offset + framing.FRAME.size + len(payload)) for offset, payload in framing.scan(data, 8, end)]


def test_a_torn_tail_discards_only_the_torn_bytes(tmp_path: Path) -> None:
    path = tmp_path / "s"
    two_series_store(path, seal=True)
    size = (path / "catalog.tsc").stat().st_size
    torn = (500).to_bytes(4, "little") + (1).to_bytes(4, "little") + b'{"first": 2'
    with open(path / "catalog.tsc", "ab") as handle:
        handle.write(torn)
    with tsdb.Store.open(path) as store:
        assert store.recovery.catalog_bytes_discarded == len(torn)
    assert (path / "catalog.tsc").stat().st_size == size
    with tsdb.Store.open(path) as store:
        assert store.series_id({"node": "b"}) == 1
        c = store.series_id({"node": "c"})
        assert c == 2
        assert store.query({"node": "c"}, *WINDOW).series == []
        (b,) = store.query({"node": "b"}, *WINDOW).series
        assert b.values.tolist() == [2.0] * 5


def test_a_record_with_a_wrong_first_id_costs_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "s"
    two_series_store(path, seal=False)
    bad = framing.frame(b'{"first":7,"labels":[{"node":"x"}]}')
    with open(path / "catalog.tsc", "ab") as handle:
        handle.write(bad)
    with tsdb.Store.open(path) as store:
        assert store.recovery.catalog_bytes_discarded == len(bad)
        assert "starts at id 7" in (store.recovery.reason or "")
        assert [dict(store.catalog.labels(sid)) for sid in range(2)] == [{"node": "a"}, {"node": "b"}]
        assert store.query({"node": "b"}, *WINDOW).series[0].values.tolist() == [2.0] * 5


@pytest.mark.parametrize("seal", [True, False], ids=["sealed", "in-wal"])
def test_an_id_with_data_is_never_reused_after_the_catalog_loses_it(tmp_path: Path, seal: bool) -> None:
    path = tmp_path / "s"
    two_series_store(path, seal=seal)
    # Cut the catalog back to its first record, as a lost page or a damaged record would.
    first_end = catalog_records(path)[0][1]
    with open(path / "catalog.tsc", "r+b") as handle:
        handle.truncate(first_end)
    with tsdb.Store.open(path) as store:
        assert store.series_id({"node": "a"}) == 0
        c = store.series_id({"node": "c"})
        assert c >= 2  # id 1 holds b's samples, in a segment or the WAL
        assert store.query({"node": "c"}, *WINDOW).series == []
        store.append(np.array([c]), T0 + 100_000, np.array([3.0]))
        assert store.query({}, *WINDOW).series[-1].values.tolist() == [3.0]
        assert {dict(s.labels)["node"] for s in store.query({}, *WINDOW).series} == {"a", "c"}
        with pytest.raises(tsdb.InvalidArgumentError):
            store.append(np.array([1]), T0 + 100_000, np.array([9.0]))
    # The reservation is durable: the next open hands out new ids above it as well.
    with tsdb.Store.open(path) as store:
        assert store.series_id({"node": "c"}) == c
        assert store.series_id({"node": "d"}) == c + 1


def test_ids_are_not_reused_when_the_catalog_file_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "s"
    two_series_store(path, seal=True)
    (path / "catalog.tsc").unlink()
    with tsdb.Store.open(path) as store:
        assert store.series_id({"node": "c"}) == 2
        assert store.query({}, *WINDOW).series == []


def test_ids_are_not_reused_in_an_older_store_without_its_state_file(tmp_path: Path) -> None:
    path = tmp_path / "s"
    two_series_store(path, seal=True)
    (path / "state.tss").unlink()
    with open(path / "catalog.tsc", "r+b") as handle:
        handle.truncate(len(HEADER))
    with tsdb.Store.open(path) as store:
        # Only the segments know id 1 was used: they are read once to find out.
        assert store.series_id({"node": "c"}) == 2

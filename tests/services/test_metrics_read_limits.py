"""The metrics read limits are a whole query's, not each store read's: a tenant's query is
several store reads (one per group of holds, per run and part of a step), and together they may
take no more than one read may."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tsdb
from services.metrics import reads, samples
from services.metrics.samples import SampleReader
from services.metrics.selection import Aggregation, Selector, Window

T0 = 1_700_000_000_000


@pytest.fixture
def store(tmp_path: Path) -> tsdb.Store:
    """Two series of 3 samples each, a second apart."""
    opened = tsdb.Store.open(tmp_path / "tsdb")
    sids = opened.series_ids([{"node": "n1", "field": "p"}, {"node": "n2", "field": "p"}])
    for k in range(3):
        opened.append(sids, T0 + 1000 * k, np.array([1.0, 2.0]))
    return opened


def test_raw_reads_share_one_budget(store: tsdb.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(samples, "MAX_SAMPLES_READ", 5)
    reader = SampleReader(store)
    window = Window(T0, T0 + 3000)
    assert len(reader.query({"node": "n1"}, window)[0].values) == 3  # 3 of 5
    with pytest.raises(tsdb.QueryTooLargeError):
        reader.query({"node": "n2"}, window)  # 3 more: 6 in all
    # Each read alone fits: a new query (a new reader) starts with the whole budget.
    assert len(SampleReader(store).query({"node": "n2"}, window)[0].values) == 3
    store.close()


def test_stepped_reads_share_one_budget(store: tsdb.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(samples, "MAX_STEP_VALUES", 5)
    reader = SampleReader(store)
    window = Window(T0, T0 + 3000)
    assert len(reader.query_range({"node": "n1"}, window, 1000, Aggregation.AVG)) == 1  # 3 values of 5
    with pytest.raises(tsdb.QueryTooLargeError):
        reader.query_range({"node": "n2"}, window, 1000, Aggregation.AVG)
    store.close()


def test_a_tenants_raw_read_spends_its_budget_only_inside_its_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held [0, 10) and [90, 100) s, another tenant's 80 s between: the read covers the holds
    only, so the other tenant's samples neither fill the budget (QUERY_TOO_LARGE) nor show in
    the stats. Only the 20 held samples count."""
    opened = tsdb.Store.open(tmp_path / "tsdb")
    (sid,) = opened.series_ids([{"node": "n1", "field": "p"}])
    for k in range(100):
        opened.append([sid], T0 + 1000 * k, np.array([float(k)]))
    monkeypatch.setattr(samples, "MAX_SAMPLES_READ", 25)
    holds = {"n1": ((T0, T0 + 10_000), (T0 + 90_000, T0 + 100_000))}
    reader = SampleReader(opened)
    (series,) = reads.query_held(reader, Selector(), holds, {})
    assert series.values.tolist() == [*map(float, range(10)), *map(float, range(90, 100))]
    assert series.timestamps_ms.tolist() == [T0 + 1000 * k for k in [*range(10), *range(90, 100)]]
    assert reader.stats.head_samples == 20
    opened.close()

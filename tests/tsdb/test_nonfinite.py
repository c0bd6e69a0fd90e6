"""NaN, infinities and values near the float64 limits are stored and aggregated as IEEE arithmetic
says, without a numpy RuntimeWarning: under warnings-as-errors every append still either happens
whole or changes nothing, and sealing, compaction and queries answer the numpy reference."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import tsdb
from tests.tsdb.helpers import T0, reference_range

SEGMENT_MS = 60_000
AGGS = ("avg", "min", "max", "sum", "count", "last", "rate")
SPECIAL = np.array([np.nan, np.inf, -np.inf, 1.0, np.inf, np.nan, 1e308, -1e308])
SAMPLES = 40


@pytest.fixture
def strict() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def values_at(k: int) -> np.ndarray:
    return SPECIAL * (1.0 if k % 2 else -1.0) + k


def test_special_values_never_warn_and_every_append_is_whole(tmp_path: Path, strict: None) -> None:
    path = tmp_path / "s"
    with tsdb.Store.open(path, segment_ms=SEGMENT_MS, compacted_segment_ms=4 * SEGMENT_MS) as store:
        sids = store.series_ids([{"node": "a", "gpu": str(g), "field": "f"} for g in range(SPECIAL.size)])
        for k in range(SAMPLES):
            # Each append crosses a window now and then, and seals it inside the call.
            assert store.append(sids, T0 + k * 10_000, values_at(k)) == SPECIAL.size
        assert store.segments()
        assert store.compact()
        check(store, sids)
        store.flush(force=True)
        check(store, sids)
    with tsdb.Store.open(path, segment_ms=SEGMENT_MS) as store:
        check(store, sids)


def test_special_values_in_the_head_answer_like_numpy(tmp_path: Path, strict: None) -> None:
    with tsdb.Store.open(tmp_path / "s", segment_ms=3_600_000) as store:
        sids = store.series_ids([{"node": "a", "gpu": str(g), "field": "f"} for g in range(SPECIAL.size)])
        for k in range(SAMPLES):
            store.append(sids, T0 + k * 10_000, values_at(k))
        assert store.segments() == ()
        check(store, sids)


def check(store: tsdb.Store, sids: np.ndarray) -> None:
    times = T0 + 10_000 * np.arange(SAMPLES, dtype=np.int64)
    table = np.stack([values_at(k) for k in range(SAMPLES)], axis=1)
    for g in range(sids.size):
        (raw,) = store.query({"gpu": str(g)}, T0, T0 + 10**7).series
        assert raw.values.view(np.uint64).tolist() == table[g].view(np.uint64).tolist()
    for start, end, step in ((T0, T0 + 10**7, 10**7), (T0 - 5_000, T0 + 400_000, 35_000), (T0, T0 + 10**6, 60_000)):
        for agg in AGGS:
            result = {s.series_id: s.values for s in store.query_range({}, start, end, step, agg).series}
            for g, sid in enumerate(sids.tolist()):
                if agg in ("sum", "avg", "rate") and np.abs(table[g]).max() > 1e300:
                    continue  # sums of +-1e308 overflow or not depending on the order of addition
                with np.errstate(all="ignore"):
                    want = reference_range(times, table[g], start, end, step, agg)
                np.testing.assert_allclose(result[sid], want, rtol=1e-9, equal_nan=True, err_msg=f"{agg} gpu {g}")

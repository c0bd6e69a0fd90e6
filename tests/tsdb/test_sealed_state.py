"""The sealed boundary outlives the segments that carried it: what retention deleted stays deleted
across a reopen, however many segments it took, while the WAL still holds the samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tsdb
from tests.tsdb.helpers import T0

SEGMENT_MS = 60_000
EVERYTHING = (T0 - 10**9, T0 + 10**9)


def fill(store: tsdb.Store) -> np.ndarray:
    sids = store.series_ids([{"node": "a", "gpu": str(g), "field": "f"} for g in range(4)])
    for k in range(70):
        store.append(sids, T0 + k * 10_000, np.arange(4.0) + k)
    return sids


def samples(store: tsdb.Store) -> list[tuple[int, float]]:
    return sorted(
        (int(t), float(v))
        for s in store.query({}, *EVERYTHING).series
        for t, v in zip(s.timestamps, s.values, strict=True)
    )


def test_retention_that_deletes_every_segment_keeps_them_deleted(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with tsdb.Store.open(path, segment_ms=SEGMENT_MS, retention_ms=SEGMENT_MS) as store:
        fill(store)
        assert len(store.segments()) == 11
        report = store.enforce_retention(T0 + 10**9)
        assert report.segments_deleted == 11
        assert store.segments() == ()
        kept = samples(store)
        assert 0 < len(kept) < 70 * 4  # the head's samples only
        assert len(kept) == store.head.samples
    with tsdb.Store.open(path, segment_ms=SEGMENT_MS, retention_ms=SEGMENT_MS) as store:
        assert samples(store) == kept
        assert store.segments() == ()
        # The boundary holds too: a sample behind it is refused as before the reopen.
        sid = int(store.select({"gpu": "0"})[0])
        try:
            store.append(np.array([sid]), T0, np.array([5.0]))
        except tsdb.OutOfOrderError as error:
            assert error.behind_boundary
        else:
            raise AssertionError("a sample behind the sealed boundary was accepted")
    with tsdb.Store.open(path, segment_ms=SEGMENT_MS) as store:
        assert samples(store) == kept


def test_a_small_size_limit_deletes_for_good(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with tsdb.Store.open(path, segment_ms=SEGMENT_MS, max_bytes=1) as store:
        fill(store)
        store.enforce_retention(T0)
        assert store.segments() == ()
        kept = samples(store)
    with tsdb.Store.open(path, segment_ms=SEGMENT_MS, max_bytes=1) as store:
        assert samples(store) == kept
        store.flush(force=True)
        store.enforce_retention(T0)
        assert samples(store) == []
    with tsdb.Store.open(path, segment_ms=SEGMENT_MS) as store:
        assert samples(store) == []
        assert store.recovery.samples_replayed == 0


def test_the_state_file_is_rewritten_only_when_the_boundary_moves(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with tsdb.Store.open(path, segment_ms=SEGMENT_MS) as store:
        fill(store)
        before = (path / "state.tss").stat().st_mtime_ns, (path / "state.tss").read_bytes()
        store.flush()  # nothing new to seal
        assert ((path / "state.tss").stat().st_mtime_ns, (path / "state.tss").read_bytes()) == before

"""The sealed boundary outlives the segments that carried it: what retention deleted stays deleted
across a reopen, however many segments it took, while the WAL still holds the samples."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

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
        with pytest.raises(tsdb.OutOfOrderError, match="sealed boundary") as refused:
            store.append(np.array([sid]), T0, np.array([5.0]))
        assert refused.value.behind_boundary
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


def failing_state_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the rename that replaces state.tss fail as on a full disk; other renames still work."""
    real_replace = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst).name == "state.tss":
            raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def files_in(path: Path) -> set[str]:
    return {p.name for p in (path / "segments").iterdir()} | {p.name for p in (path / "wal").iterdir()}


def test_retention_deletes_nothing_until_the_state_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    with tsdb.Store.open(path, segment_ms=SEGMENT_MS, retention_ms=SEGMENT_MS) as store:
        fill(store)
        store.series_ids([{"node": "b", "gpu": "0", "field": "f"}])  # the id mark in state.tss is stale now
        segments, before = store.segments(), files_in(path)
        failing_state_write(monkeypatch)
        with pytest.raises(OSError, match="No space left on device"):
            store.enforce_retention(T0 + 10**9)
        assert store.segments() == segments
        assert files_in(path) == before
        monkeypatch.undo()
        assert store.enforce_retention(T0 + 10**9).segments_deleted == len(segments)


def test_a_flush_keeps_the_wal_until_the_state_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    with tsdb.Store.open(path, segment_ms=SEGMENT_MS) as store:
        fill(store)
        everything = samples(store)
        wal_before = {p.name for p in (path / "wal").iterdir()}
        failing_state_write(monkeypatch)
        with pytest.raises(OSError, match="No space left on device"):
            store.flush(force=True)
        assert wal_before <= {p.name for p in (path / "wal").iterdir()}
        monkeypatch.undo()
    with tsdb.Store.open(path, segment_ms=SEGMENT_MS) as store:
        assert samples(store) == everything

"""Retention deletes whole files and nothing else: every surviving file is byte-identical, and the
size limit counts every byte of the store, WAL included."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tsdb
from tests.tsdb.helpers import ingest, make_fleet, sha256_files

SEGMENT_MS = 60_000


def build(path: Path, **options: int) -> tuple[tsdb.Store, np.ndarray]:
    store = tsdb.Store.open(path, segment_ms=SEGMENT_MS, **options)
    fleet = make_fleet(nodes=1, gpus=2, samples=20 * 12, interval_ms=5_000)
    ingest(store, fleet, store.series_ids(fleet.labels))
    return store, fleet.timestamps


def test_time_retention_deletes_only_whole_expired_files(tmp_path: Path) -> None:
    store, timestamps = build(tmp_path / "s", retention_ms=5 * SEGMENT_MS)
    with store:
        segments_dir = tmp_path / "s" / "segments"
        before = sha256_files(segments_dir)
        segments = store.segments()
        assert len(segments) >= 15
        now = int(timestamps[-1]) + 1
        cutoff = now - 5 * SEGMENT_MS
        expired = {Path(s.path).name for s in segments if s.tmax < cutoff}
        assert expired
        assert len(expired) < len(segments)
        oldest_kept = min(s.tmin for s in segments if s.tmax >= cutoff)

        report = store.enforce_retention(now)

        assert {Path(f).name for f in report.deleted_files if f.endswith(".tsg")} == expired
        assert report.segments_deleted == len(expired)
        assert report.bytes_freed >= sum(s.size for s in segments if Path(s.path).name in expired)
        after = sha256_files(segments_dir)
        assert set(after) == set(before) - expired
        assert all(after[name] == before[name] for name in after)  # nothing rewritten
        # A whole segment lives until its newest sample expires: the overhang is < one segment.
        assert cutoff - SEGMENT_MS < oldest_kept <= cutoff
        result = store.query({}, int(timestamps[0]), now)
        assert min(int(s.timestamps[0]) for s in result.series) == oldest_kept
        assert store.enforce_retention(now).deleted_files == []


def test_size_retention_counts_wal_bytes(tmp_path: Path) -> None:
    store, timestamps = build(tmp_path / "s")
    store.flush(force=True)
    sids = store.select({})
    for i in range(1, 10):  # samples only the WAL (and the head) hold
        store.append(sids, int(timestamps[-1]) + 1_000 * i, np.full(sids.size, float(i)))
    usage = store.disk_usage()
    store.close()
    assert usage["total"] == usage["segments"] + usage["wal"] + usage["catalog"]
    oldest = min(store.manifest.segments, key=lambda s: s.tmax)
    assert 0 < usage["wal"] < oldest.size
    # Segments and catalog alone fit; only the WAL's bytes push the store over the limit.
    limit = usage["segments"] + usage["catalog"]
    with tsdb.Store.open(tmp_path / "s", segment_ms=SEGMENT_MS, max_bytes=limit) as store:
        segments = sorted(store.segments(), key=lambda s: s.tmax)
        before = sha256_files(tmp_path / "s" / "segments")
        report = store.enforce_retention(0)
        assert report.segments_deleted == 1
        assert report.bytes_on_disk <= limit
        assert report.bytes_on_disk == store.disk_usage()["total"]
        deleted = {Path(f).name for f in report.deleted_files if f.endswith(".tsg")}
        # The oldest go first.
        assert deleted == {Path(s.path).name for s in segments[: len(deleted)]}
        after = sha256_files(tmp_path / "s" / "segments")
        assert all(after[name] == before[name] for name in after)


def test_retention_of_one_segment_is_one_unlink(tmp_path: Path) -> None:
    store, _ = build(tmp_path / "s", retention_ms=19 * SEGMENT_MS)
    with store:
        segments = store.segments()
        now = segments[0].tmax + 19 * SEGMENT_MS + 1
        report = store.enforce_retention(now)
        assert [Path(f).name for f in report.deleted_files] == [Path(segments[0].path).name]
        assert store.segments() == segments[1:]

"""Sealed segment files: the documented header and footer, CRC checks, compaction that is safe
against a crash, its retention cap, and a WAL that is truncated once its samples are sealed."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import tsdb
import tsdb.sealing
from tests.tsdb.helpers import T0, Fleet, ingest, make_fleet, sha256_files
from tsdb.segment_reader import SegmentReader

SEGMENT_MS = 60_000


def sealed_store(path: Path, fleet: Fleet, **options: int) -> tsdb.Store:
    store = tsdb.Store.open(path, segment_ms=SEGMENT_MS, compacted_segment_ms=10 * SEGMENT_MS, **options)
    ingest(store, fleet, store.series_ids(fleet.labels))
    store.flush(force=True)
    return store


def all_samples(store: tsdb.Store) -> dict[int, tuple[list[int], list[float]]]:
    result = store.query({}, T0 - 10**9, T0 + 10**9)
    return {s.series_id: (s.timestamps.tolist(), s.values.tolist()) for s in result.series}


def test_header_and_footer_give_the_time_range_without_decoding(tmp_path: Path) -> None:
    fleet = make_fleet(samples=150)
    with sealed_store(tmp_path / "s", fleet) as store:
        for info in store.segments():
            data = Path(info.path).read_bytes()
            magic, version, level, _, tmin, tmax, sealed_until, n_series, n_chunks = struct.unpack_from(
                "<4sHBBqqqII", data, 0
            )
            assert (magic, version, level, n_series, n_chunks) == (b"TSG1", 1, 0, len(fleet.labels), 1)
            assert (tmin, tmax) == (info.tmin, info.tmax)
            assert Path(info.path).name == f"L0_{tmin}_{tmax}_{info.seq:08d}.tsg"
            assert tmax < sealed_until
            meta_off, meta_len, _, _, _, _, end = struct.unpack_from("<QIIIII4s", data, len(data) - 32)
            assert end == b"GST1"
            assert meta_off + meta_len + 32 == len(data)
            window = fleet.timestamps[(fleet.timestamps >= tmin) & (fleet.timestamps <= tmax)]
            assert (tmin, tmax) == (window[0], window[-1])
        # The last one was cut by the forced flush, mid-window.
        assert struct.unpack_from("<B", Path(store.segments()[-1].path).read_bytes(), 7)[0] == 1


def test_a_damaged_segment_raises_corrupt_segment_error(tmp_path: Path) -> None:
    fleet = make_fleet(samples=150)
    with sealed_store(tmp_path / "s", fleet) as store:
        victim = Path(store.segments()[1].path)
        data = bytearray(victim.read_bytes())
        data[60] ^= 0x55  # inside the first blob
        victim.write_bytes(bytes(data))
        with pytest.raises(tsdb.CorruptSegmentError):
            store.query({}, victim_tmin(victim), victim_tmin(victim) + 1_000)
        # Windows that do not touch it still answer.
        assert store.query({}, T0, T0 + 20_000).series
        wrecked = Path(store.segments()[2].path)
    wrecked.write_bytes(b"\0" * 100)  # header, footer and all
    with tsdb.Store.open(tmp_path / "s", segment_ms=SEGMENT_MS) as store:  # opening still works
        with pytest.raises(tsdb.CorruptSegmentError):
            store.query({}, victim_tmin(wrecked), victim_tmin(wrecked) + 1_000)
        assert store.query({}, T0, T0 + 20_000).series


def test_segment_metadata_must_decompress_to_the_size_in_the_footer(tmp_path: Path) -> None:
    fleet = make_fleet(samples=150)
    with sealed_store(tmp_path / "s", fleet) as store:
        path = Path(store.segments()[0].path)
    data = bytearray(path.read_bytes())
    reader = SegmentReader(str(path))
    assert reader.n_series == len(fleet.labels)
    reader.close()
    raw_len = struct.unpack_from("<I", data, len(data) - 20)[0]
    struct.pack_into("<I", data, len(data) - 20, raw_len + 1)  # meta_raw_len; no CRC covers it
    path.write_bytes(bytes(data))
    with pytest.raises(tsdb.CorruptSegmentError, match="metadata"):
        SegmentReader(str(path))


def victim_tmin(path: Path) -> int:
    return int(path.name.split("_")[1])


def test_compaction_merges_whole_spans_and_a_crash_midway_is_finished_on_open(tmp_path: Path) -> None:
    fleet = make_fleet(samples=1500)  # 25 minutes
    store = sealed_store(tmp_path / "s", fleet)
    expected = all_samples(store)
    segments_dir = tmp_path / "s" / "segments"
    before = {p.name for p in segments_dir.iterdir()}
    saved = tmp_path / "saved"
    shutil.copytree(segments_dir, saved)

    compacted = store.compact()
    assert len(compacted) == 2  # two complete 10-minute spans; the last partial one stays L0
    for info in compacted:
        assert info.level == 1
        assert info.tmin // (10 * SEGMENT_MS) == info.tmax // (10 * SEGMENT_MS)
    assert all_samples(store) == expected
    assert store.compact() == []  # nothing left to merge
    after = sha256_files(segments_dir)
    store.close()

    # Replay a crash after the rename, before the inputs were deleted, plus a torn temp file.
    for name in before:
        if not (segments_dir / name).exists():
            shutil.copy(saved / name, segments_dir / name)
    (segments_dir / "L1_1_2_00000099.tsg.tmp").write_bytes(b"half a segment")
    with tsdb.Store.open(tmp_path / "s", segment_ms=SEGMENT_MS, compacted_segment_ms=10 * SEGMENT_MS) as store:
        assert sha256_files(segments_dir) == after
        assert all_samples(store) == expected
        # A narrow query on a compacted file decodes one chunk of one value group, not the span.
        sid = store.series_id(fleet.labels[0])
        start = compacted[0].tmin + 30_000
        result = store.query({"node": "n0", "gpu": "0", "field": "util"}, start, start + 60_000)
        assert result.series[0].series_id == sid
        assert 0 < result.stats.samples_decoded <= 3 * 60 * 2  # at most 3-minute chunks of a 2-row group


def test_compacted_span_is_capped_at_a_tenth_of_retention(tmp_path: Path) -> None:
    fleet = make_fleet(nodes=1, gpus=1, samples=1500)
    with sealed_store(tmp_path / "s", fleet, retention_ms=40 * SEGMENT_MS) as store:
        compacted = store.compact()
        assert compacted
        for info in compacted:
            assert info.tmin // (4 * SEGMENT_MS) == info.tmax // (4 * SEGMENT_MS)
            assert info.tmax - info.tmin < 4 * SEGMENT_MS
    with sealed_store(tmp_path / "t", fleet, retention_ms=15 * SEGMENT_MS) as store:
        assert store.compact() == []  # 10% of retention is one window: nothing to merge


def test_wal_is_truncated_once_its_samples_are_sealed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tsdb.sealing, "WAL_ROTATE_BYTES", 2_000)
    fleet = make_fleet(nodes=1, gpus=2, samples=3000)
    store = tsdb.Store.open(tmp_path / "s", segment_ms=SEGMENT_MS)
    sids = store.series_ids(fleet.labels)
    peak = 0
    for i in range(0, 3000, 100):
        ingest_slice(store, fleet, sids, i, i + 100)
        peak = max(peak, store.disk_usage()["wal"])
    head = store.head.samples
    store.close()
    everything = fleet.values.size * 8
    assert peak < everything / 10  # the WAL holds about two windows, not the whole history
    with tsdb.Store.open(tmp_path / "s", segment_ms=SEGMENT_MS) as store:
        assert store.recovery.samples_replayed == head
        assert store.recovery.records_replayed < 3000 / 10
        got = all_samples(store)
        assert [len(ts) for ts, _ in got.values()] == [3000] * len(fleet.labels)


def ingest_slice(store: tsdb.Store, fleet: Fleet, sids: np.ndarray, lo: int, hi: int) -> None:
    for i in range(lo, hi):
        store.append(sids, int(fleet.timestamps[i]), fleet.values[:, i])


def test_replay_skips_samples_a_segment_already_holds(tmp_path: Path) -> None:
    fleet = make_fleet(samples=400)
    with tsdb.Store.open(tmp_path / "s", segment_ms=SEGMENT_MS) as store:
        ingest(store, fleet, store.series_ids(fleet.labels))
        assert store.segments()
        expected = all_samples(store)
    # The WAL file was never rotated (small), so it still holds sealed samples.
    with tsdb.Store.open(tmp_path / "s", segment_ms=SEGMENT_MS) as store:
        assert store.recovery.samples_already_sealed > 0
        assert all_samples(store) == expected

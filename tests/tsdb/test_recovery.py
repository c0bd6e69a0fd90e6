"""Recovery: a torn or corrupted WAL tail loses only what follows the damage, is reported, and
never stops the store from opening; an acknowledged append survives kill -9 of its writer."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tsdb
from tests.tsdb.helpers import T0
from tsdb import framing, wal

LABELS = [{"node": "n0", "gpu": str(g), "field": f} for g in range(4) for f in ("util", "power_w")]
BATCHES = 20


def write_batches(path: Path) -> list[float]:
    """BATCHES pushes of len(LABELS) samples, one second apart; returns each batch's first value."""
    firsts: list[float] = []
    with tsdb.Store.open(path, segment_ms=3_600_000) as store:
        sids = store.series_ids(LABELS)
        for i in range(BATCHES):
            values = np.round(np.random.default_rng(i).normal(100, 10, len(LABELS)), 2)
            store.append(sids, T0 + 1_000 * i, values)
            firsts.append(float(values[0]))
    return firsts


def record_offsets(path: Path) -> tuple[Path, list[int], int]:
    """The WAL file holding the records, each record's offset, and the file size."""
    files = [p for p in sorted((path / "wal").glob("*.wal")) if p.stat().st_size > len(wal.HEADER)]
    assert len(files) == 1
    data = files[0].read_bytes()
    end = framing.ScanEnd(0, False, None)
    offsets = [offset for offset, _ in framing.scan(data, len(wal.HEADER), end)]
    assert not end.damaged
    assert len(offsets) == BATCHES
    return files[0], offsets, len(data)


def times_in(store: tsdb.Store) -> list[int]:
    series = store.query({"gpu": "0", "field": "util"}, T0 - 1, T0 + 10**6).series
    return series[0].timestamps.tolist() if series else []


def test_torn_tail_keeps_every_record_before_it(tmp_path: Path) -> None:
    write_batches(tmp_path / "s")
    file, offsets, _ = record_offsets(tmp_path / "s")
    cut = offsets[-1] + 11  # mid-record: header whole, payload torn
    os.truncate(file, cut)
    with tsdb.Store.open(tmp_path / "s", segment_ms=3_600_000) as store:
        report = store.recovery
        assert report.records_replayed == BATCHES - 1
        assert report.samples_replayed == (BATCHES - 1) * len(LABELS)
        assert report.records_discarded == 1
        assert report.bytes_discarded == cut - offsets[-1]
        assert report.reason is not None
        assert "torn" in report.reason
        assert times_in(store) == [T0 + 1_000 * i for i in range(BATCHES - 1)]
        # The store keeps working, and the damage was cut off, so it is reported once only.
        store.append(store.series_ids(LABELS), T0 + 1_000 * BATCHES, np.ones(len(LABELS)))
    with tsdb.Store.open(tmp_path / "s", segment_ms=3_600_000) as store:
        assert store.recovery.bytes_discarded == 0
        assert store.recovery.reason is None
        assert times_in(store)[-2:] == [T0 + 1_000 * (BATCHES - 2), T0 + 1_000 * BATCHES]


def test_a_corrupted_byte_in_a_late_record_loses_only_that_record_and_what_follows(tmp_path: Path) -> None:
    firsts = write_batches(tmp_path / "s")
    file, offsets, size = record_offsets(tmp_path / "s")
    damaged = BATCHES - 3
    data = bytearray(file.read_bytes())
    data[offsets[damaged] + framing.FRAME.size + 5] ^= 0xFF
    file.write_bytes(bytes(data))
    with tsdb.Store.open(tmp_path / "s", segment_ms=3_600_000) as store:
        report = store.recovery
        assert report.records_replayed == damaged
        assert report.records_discarded == 3
        assert report.samples_discarded == 2 * len(LABELS)  # the two intact records after the bad one
        assert report.bytes_discarded == size - offsets[damaged]
        assert report.reason is not None
        assert "CRC" in report.reason
        assert times_in(store) == [T0 + 1_000 * i for i in range(damaged)]
        got = store.query({"gpu": "0", "field": "util"}, T0 - 1, T0 + 10**6).series[0].values
        assert got.tolist() == firsts[:damaged]


def test_a_wal_cut_anywhere_still_opens(tmp_path: Path) -> None:
    write_batches(tmp_path / "s")
    file, offsets, size = record_offsets(tmp_path / "s")
    pristine = file.read_bytes()
    for cut in (0, 3, len(wal.HEADER), offsets[1] - 1, offsets[5] + 2, size - 1):
        file.write_bytes(pristine[:cut])
        with tsdb.Store.open(tmp_path / "s", segment_ms=3_600_000) as store:
            whole = sum(1 for offset in offsets if offset + (offsets[1] - offsets[0]) <= cut)
            assert store.recovery.records_replayed <= whole
            assert len(times_in(store)) == store.recovery.records_replayed
        for extra in (tmp_path / "s" / "wal").glob("*.wal"):
            if extra != file:
                extra.unlink()


def test_a_torn_catalog_tail_is_cut_off(tmp_path: Path) -> None:
    with tsdb.Store.open(tmp_path / "s") as store:
        store.series_ids(LABELS[:3])
        store.series_ids(LABELS[3:])
    catalog = tmp_path / "s" / "catalog.tsc"
    size = catalog.stat().st_size
    os.truncate(catalog, size - 4)
    with tsdb.Store.open(tmp_path / "s") as store:
        assert store.recovery.catalog_bytes_discarded > 0
        assert store.select({}).size == 3
        assert store.series_ids(LABELS).tolist() == list(range(len(LABELS)))


WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tsdb

    path, t0 = sys.argv[1], int(sys.argv[2])
    labels = [{"node": f"n{n}", "gpu": str(g), "field": "util"} for n in range(2) for g in range(8)]
    store = tsdb.Store.open(path, segment_ms=20_000, fsync_interval_ms=20)
    sids = store.series_ids(labels).reshape(2, 8)
    i = 0
    while True:
        t = t0 + 1_000 * i
        for node in range(2):
            store.append(sids[node], t, np.full(8, float(i)))
        print("ack", t, flush=True)
        i += 1
    """
)


def test_every_acknowledged_batch_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "s"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(T0)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert child.stdout is not None
    acknowledged: list[int] = []
    try:
        # Enough batches for several segment flushes (20 s windows) to happen under the kill.
        while len(acknowledged) < 100:
            line = child.stdout.readline()
            assert line, "the writer died on its own"
            if line.startswith("ack "):  # other lines are the store's logs
                acknowledged.append(int(line.split()[1]))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    # Lines printed after our last read were acknowledged too; the kill may have cut the last one
    # short ("ack 17646"), and only lines that reached their newline count.
    *whole, _torn_or_empty = child.stdout.read().split("\n")
    acknowledged += [int(line.split()[1]) for line in whole if line.startswith("ack ")]
    with tsdb.Store.open(path, segment_ms=20_000) as store:
        assert store.segments(), "the writer sealed segments before it died"
        assert store.recovery.records_replayed > 0, "and left samples in the head"
        series = store.query({}, T0, T0 + 10**7).series
        assert len(series) == 16
        for s in series:
            stored = set(s.timestamps.tolist())
            missing = [t for t in acknowledged if t not in stored]
            assert not missing, f"{s.labels} lost acknowledged samples {missing[:5]}"
            np.testing.assert_array_equal(s.values, (s.timestamps - T0) // 1_000)


def test_a_log_deleted_under_the_open_store_is_reported_and_refuses_later_appends(tmp_path: Path) -> None:
    """Removing the store's directory while it is open leaves the log's file descriptor writable:
    ``append`` still returns, into a file no restart will read. ``ensure_wal_present`` says so,
    and from then on every append is refused, so a caller that checks never acknowledges a
    batch that is gone."""
    path = tmp_path / "store"
    store = tsdb.Store.open(path, segment_ms=3_600_000)
    try:
        sids = store.series_ids(LABELS)
        store.append(sids, T0, np.ones(len(LABELS)))
        store.ensure_wal_present()  # the file is there: nothing to say
        for wal_file in (path / "wal").glob("*.wal"):
            wal_file.unlink()
        store.append(sids, T0 + 1_000, np.ones(len(LABELS)))
        with pytest.raises(tsdb.WalError, match="deleted while the store was open"):
            store.ensure_wal_present()
        with pytest.raises(tsdb.WalError, match="unusable"):
            store.append(sids, T0 + 2_000, np.ones(len(LABELS)))
    finally:
        with contextlib.suppress(tsdb.WalError, OSError):
            store.close()

"""Sealing that fails inside an append: a storage failure leaves the append's batch stored and
acknowledged (sealing is retried later); any other error is a defect and is raised."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import tsdb
from tests.tsdb.helpers import T0

WINDOW_MS = 60_000
# Half a window past the first window's end: the append that reaches it seals that window.
SEALING_MS = T0 - T0 % WINDOW_MS + WINDOW_MS + WINDOW_MS // 2


def open_store(path: Path) -> tsdb.Store:
    return tsdb.Store.open(path, segment_ms=WINDOW_MS, fsync_interval_ms=0)


def failing_rename(error: BaseException) -> Callable[..., None]:
    """A stand-in for ``os.replace``, the last step of writing a segment, that fails with ``error``."""

    def rename(*_: object, **__: object) -> None:
        raise error

    return rename


def test_a_full_disk_while_sealing_still_stores_the_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_store(tmp_path / "s") as store:
        (sid,) = store.series_ids([{"node": "n0", "field": "power_w"}])
        store.append(np.array([sid]), T0, [1.0])
        monkeypatch.setattr(os, "replace", failing_rename(OSError(errno.ENOSPC, "No space left on device")))
        assert store.append(np.array([sid]), SEALING_MS, [2.0]) == 1
        monkeypatch.undo()
        assert store.segments() == ()  # nothing was sealed, and nothing is lost
        [series] = store.query({}, T0, SEALING_MS + 1).series
        assert series.timestamps.tolist() == [T0, SEALING_MS]
        assert store.flush() != []  # sealing works again once the disk does
    with open_store(tmp_path / "s") as store:
        [series] = store.query({}, T0, SEALING_MS + 1).series
        assert series.values.tolist() == [1.0, 2.0]


def test_a_defect_while_sealing_is_raised_not_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_store(tmp_path / "s") as store:
        (sid,) = store.series_ids([{"node": "n0", "field": "power_w"}])
        store.append(np.array([sid]), T0, [1.0])
        monkeypatch.setattr(os, "replace", failing_rename(TypeError("a defect in sealing")))
        with pytest.raises(TypeError, match="a defect in sealing"):
            store.append(np.array([sid]), SEALING_MS, [2.0])

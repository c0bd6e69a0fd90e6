"""A store's files are 0600 and its directories 0700 whatever the process umask, and a store left
with wider modes is narrowed when it is opened."""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np

import tsdb
from tests.tsdb.helpers import T0


def modes(root: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for entry in root.rglob("*"):
        found[str(entry.relative_to(root))] = stat.S_IMODE(entry.stat().st_mode)
    return found


def fill(path: Path) -> None:
    with tsdb.Store.open(path, segment_ms=60_000, compacted_segment_ms=120_000) as store:
        sids = store.series_ids([{"node": "a", "gpu": str(g)} for g in range(2)])
        for k in range(40):
            store.append(sids, T0 + 10_000 * k, np.array([1.0, 2.0]))
        store.compact()


def assert_private(path: Path) -> None:
    found = modes(path)
    assert {"catalog.tsc", "LOCK", "state.tss", "wal", "segments"} <= set(found)
    assert any(name.endswith(".tsg") for name in found)
    assert any(name.endswith(".wal") for name in found)
    for name, mode in found.items():
        want = 0o700 if (path / name).is_dir() else 0o600
        assert mode == want, f"{name}: {oct(mode)}"


def test_new_files_and_directories_are_private_under_umask_022(tmp_path: Path, umask_022: None) -> None:
    fill(tmp_path / "s")
    assert_private(tmp_path / "s")


def test_opening_narrows_a_store_with_wider_modes(tmp_path: Path, umask_022: None) -> None:
    path = tmp_path / "s"
    fill(path)
    for entry in [path, *path.rglob("*")]:
        entry.chmod(0o755 if entry.is_dir() else 0o644)
    with tsdb.Store.open(path, segment_ms=60_000):
        pass
    assert_private(path)

"""A disk that fills mid-write: the store's files take a short write, then the reason."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tsdb import _fs


def test_a_short_write_is_finished_and_a_full_disk_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The kernel writes what fits, then refuses the rest with ENOSPC: the rest is tried, and the
    error is the kernel's ENOSPC (not a "short write" that no caller could map)."""
    calls: list[int] = []
    real_write = os.write

    def filling(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[:5])  # what fitted
        raise OSError(errno.ENOSPC, "No space left on device")

    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        monkeypatch.setattr("tsdb._fs.os.write", filling)
        with pytest.raises(OSError, match="No space left on device") as raised:
            _fs.write_all(fd, b"0123456789")
    finally:
        os.close(fd)
    assert raised.value.errno == errno.ENOSPC
    assert calls == [10, 5]  # the rest was tried after the short write
    assert path.read_bytes() == b"01234"


def test_write_all_finishes_after_short_writes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_write = os.write
    monkeypatch.setattr("tsdb._fs.os.write", lambda fd, data: real_write(fd, bytes(data)[:3]))
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        _fs.write_all(fd, b"0123456789")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"0123456789"


def test_dev_full_is_a_full_disk() -> None:
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        with pytest.raises(OSError, match="No space left on device") as raised:
            _fs.write_all(fd, b"x" * 4096)
    finally:
        os.close(fd)
    assert raised.value.errno == errno.ENOSPC

"""File-system durability helpers shared by the WAL, the segment writer and the store."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename, create or unlink in it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte of ``data`` is written. A file takes a short write when its
    disk fills; the write of the rest then fails with the reason (ENOSPC), which callers report
    as a full disk rather than as a short write of no known cause."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # no progress and no error: say what it most likely is
            raise OSError(errno.ENOSPC, f"no byte written of the last {len(view)}")
        view = view[written:]

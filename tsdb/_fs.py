"""File-system helpers shared by the WAL, the catalog, the segment writer and the store: durable
writes, and file modes that keep a store private to its owner whatever the process umask."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Final

# A store holds every tenant's telemetry: only its owner may read it.
FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700


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


def open_private(path: Path, flags: int) -> int:
    """``os.open`` with O_CREAT, the file left at FILE_MODE: a umask only removes bits, and a file
    one created wider (under a wide umask, by hand) is narrowed, so one fstat settles both."""
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_dir(path: Path) -> None:
    """Create the directory (and its parents) if missing, and leave it at DIR_MODE."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != DIR_MODE:
        path.chmod(DIR_MODE)


def narrow_files(directory: Path) -> int:
    """Set every regular file directly in `directory` that others may read or write to FILE_MODE;
    returns how many were changed (files created wider, under a wide umask or by hand)."""
    narrowed = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False) and stat.S_IMODE(entry.stat().st_mode) & 0o077:
                os.chmod(entry.path, FILE_MODE)
                narrowed += 1
    return narrowed

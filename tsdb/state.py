"""The store's durable state, in ``state.tss``: the sealed boundary and the next series id.

Both must outlive the files that imply them. Segment headers carry the boundary, but retention
may delete every segment while the WAL still holds the samples they sealed; without the boundary
a reopen would replay those samples into the head and seal them again. Segments and the WAL name
series by id, but the catalog may lose records (a damaged tail, a lost page, a deleted file);
without a high-water mark a new series could take an id whose samples are still stored.

File layout: an 8-byte header (``b"TSS1" | version u16 | reserved u16``) then one frame (see
tsdb.framing) whose payload is UTF-8 JSON ``{"sealed_until": <ms>, "next_series_id": <id>}``.
The file is replaced whole (written aside, fsynced, renamed, directory fsynced), so a reader
finds the old state or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tsdb import framing
from tsdb._fs import fsync_dir, open_private, write_all
from tsdb.errors import StateError

FILE_NAME: Final = "state.tss"
MAGIC: Final = b"TSS1"
VERSION: Final = 1
HEADER: Final = MAGIC + VERSION.to_bytes(2, "little") + b"\0\0"
_TMP_SUFFIX: Final = ".tmp"


@dataclass(frozen=True, slots=True)
class StoreState:
    """Every sample older than `sealed_until` was sealed (and may since have been deleted);
    no segment or WAL record names a series id at or above `next_series_id` that the catalog
    does not hold."""

    sealed_until: int
    next_series_id: int


def read_state(directory: Path) -> StoreState | None:
    """The state in `directory`; None when there is no state file (a new store, or one written
    before the file existed). StateError when it is damaged."""
    path = directory / FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if data[: len(HEADER)] != HEADER:
        raise StateError(f"{path}: bad header")
    end = framing.ScanEnd(0, False, None)
    frames = list(framing.scan(data, len(HEADER), end))
    if end.damaged or len(frames) != 1:
        raise StateError(f"{path}: {end.reason or f'{len(frames)} records, expected 1'}")
    try:
        record = json.loads(bytes(frames[0][1]))
        sealed_until, next_id = record["sealed_until"], record["next_series_id"]
    except (ValueError, TypeError, KeyError) as exc:
        raise StateError(f"{path}: unreadable record: {exc}") from exc
    if not isinstance(sealed_until, int) or not isinstance(next_id, int) or next_id < 0:
        raise StateError(f"{path}: bad values {record!r}")
    return StoreState(sealed_until, next_id)


def write_state(directory: Path, state: StoreState) -> None:
    """Replace the state file atomically and durably."""
    payload = json.dumps(
        {"sealed_until": state.sealed_until, "next_series_id": state.next_series_id}, separators=(",", ":")
    ).encode()
    final = directory / FILE_NAME
    tmp = directory / (FILE_NAME + _TMP_SUFFIX)
    try:
        fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
        try:
            write_all(fd, HEADER + framing.frame(payload))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)

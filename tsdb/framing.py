"""Length + CRC32 record framing shared by the write-ahead log, the label catalog and the state file.

A frame is ``length u32 | crc32(payload) u32 | payload`` (little-endian). Reading stops at the
first frame that is torn (shorter than it claims) or whose CRC does not match: nothing after a bad
frame can be trusted to start on a frame boundary, so the reader reports where the damage begins.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

FRAME: Final = struct.Struct("<II")
# A record larger than this is treated as a corrupt length field rather than allocated.
MAX_PAYLOAD: Final = 256 << 20


def frame(payload: bytes) -> bytes:
    """The framed bytes of one record."""
    return FRAME.pack(len(payload), zlib.crc32(payload)) + payload


@dataclass(slots=True)
class ScanEnd:
    """Where a scan stopped: `good_end` is the offset just past the last intact frame."""

    good_end: int
    damaged: bool
    reason: str | None


def scan(buffer: bytes | memoryview, start: int, end: ScanEnd) -> Iterator[tuple[int, memoryview]]:
    """Yield (offset, payload) for each intact frame from `start`; fill `end` when the scan stops."""
    view = memoryview(buffer)
    size = len(view)
    offset = start
    end.good_end, end.damaged, end.reason = start, False, None
    while offset < size:
        if size - offset < FRAME.size:
            end.damaged, end.reason = True, f"torn frame header at offset {offset}"
            return
        length, crc = FRAME.unpack_from(view, offset)
        body_start = offset + FRAME.size
        if length > MAX_PAYLOAD or body_start + length > size:
            end.damaged, end.reason = True, f"torn or oversized record at offset {offset} (claims {length} bytes)"
            return
        payload = view[body_start : body_start + length]
        if zlib.crc32(payload) != crc:
            end.damaged, end.reason = True, f"CRC mismatch in record at offset {offset}"
            return
        yield offset, payload
        offset = body_start + length
        end.good_end = offset


def salvageable(buffer: bytes | memoryview, start: int) -> Iterator[memoryview]:
    """Best effort: the intact frames after a damaged one at `start`, found by trusting its length.

    Used only to report what a truncation discards; these records are never replayed.
    """
    view = memoryview(buffer)
    if len(view) - start < FRAME.size:
        return
    length, _ = FRAME.unpack_from(view, start)
    if length > MAX_PAYLOAD:
        return
    tail = ScanEnd(0, False, None)
    for _, payload in scan(view, start + FRAME.size + length, tail):
        yield payload

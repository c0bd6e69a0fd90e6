"""Timestamp column codec: a 21-byte header for constant strides, packed differences otherwise.

Blob layouts (little-endian):

- REGULAR  ``kind=1 u8 | count u32 | t0 i64 | step i64`` -- ts[i] = t0 + i * step, no payload.
- IRREGULAR ``kind=2 u8 | count u32 | t0 i64 | tmin i64 | tmax i64 | mode u8 | width u8 | param i64 |
  reference i64 | zstd frame``. mode = order | shuffle << 4. The frame holds `count - order` residuals
  minus their minimum (`reference`), each packed in `width` bytes (byte planes split when shuffled):
  order 0 -- ts[i] - i * step with step = param (the average stride): jittered scrapes cost only
  their jitter; order 1 -- deltas (param unused); order 2 -- delta-of-delta, param = first delta:
  mostly-regular series with rare gaps. The encoder keeps whichever candidate is smallest.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

import numpy as np

from tsdb._codec_common import (
    I64,
    MASK64,
    U64,
    WIDTHS,
    CodecInputError,
    CorruptBlobError,
    check_level,
    compress,
    decompress,
    difference,
    frame_of_reference,
    integrate,
    pack,
    unpack,
    width_codes,
)
from tsdb._int64 import INT64_MAX, INT64_MIN

_REGULAR: Final = 1
_IRREGULAR: Final = 2
_REGULAR_HEADER: Final = struct.Struct("<BIqq")
_IRREGULAR_HEADER: Final = struct.Struct("<BIqqqBBqq")
_MAX_COUNT: Final = (1 << 32) - 1


@dataclass(frozen=True, slots=True)
class TimestampsInfo:
    """What a timestamp blob's header says, read without decoding its payload.

    step is 0 for an irregular column (and for a column of equal timestamps: see `regular`);
    tmin and tmax are 0 for an empty column.
    """

    t0: int
    step: int
    count: int
    tmin: int
    tmax: int
    regular: bool


def _signed(value: int) -> int:
    """Reinterpret a value modulo 2**64 as int64."""
    value &= MASK64
    return value - (1 << 64) if value >> 63 else value


def encode_timestamps(ts: I64, *, level: int = 1) -> bytes:
    """Encode a 1-D int64 column of millisecond timestamps into a self-describing blob.

    Any int64 sequence round-trips exactly (timestamps need not be sorted or distinct).
    """
    check_level(level)
    column = np.asarray(ts)
    if column.ndim != 1 or column.dtype.kind not in "iu":
        raise CodecInputError(f"timestamps must be a 1-D integer array, got {column.dtype} with shape {column.shape}")
    if column.dtype.kind == "u" and column.size and int(column.max()) > INT64_MAX:
        raise CodecInputError("timestamps must fit int64")
    column = np.ascontiguousarray(column, dtype=np.int64)
    count = column.size
    if count > _MAX_COUNT:
        raise CodecInputError(f"at most {_MAX_COUNT} timestamps per blob, got {count}")
    if count == 0:
        return _REGULAR_HEADER.pack(_REGULAR, 0, 0, 0)
    t0 = int(column[0])
    if count == 1:
        return _REGULAR_HEADER.pack(_REGULAR, 1, t0, 0)
    raw = column.view(np.uint64)
    deltas = raw[1:] - raw[:-1]
    step = _signed(int(deltas[0]))
    # A constant modular delta is only a true arithmetic progression when its end stays in range.
    if bool((deltas == deltas[0]).all()) and INT64_MIN <= t0 + step * (count - 1) <= INT64_MAX:
        return _REGULAR_HEADER.pack(_REGULAR, count, t0, step)
    tmin, tmax = int(column.min()), int(column.max())
    best: bytes | None = None
    for order in (0, 1, 2) if count > 2 else (1,):
        param, shifted, reference, code = _residuals(raw, order)
        for shuffle in (False, True) if WIDTHS[code] > 1 else (False,):
            payload = pack(shifted, WIDTHS[code], shuffle)
            mode = order | shuffle << 4
            header = _IRREGULAR_HEADER.pack(_IRREGULAR, count, t0, tmin, tmax, mode, code, param, reference)
            blob = header + (compress(payload, level) if payload else b"")
            if best is None or len(blob) < len(best):
                best = blob
    assert best is not None
    return best


def _residuals(raw: U64, order: int) -> tuple[int, U64, int, int]:
    """One candidate coding of an irregular column: (param, shifted residuals, reference, width code)."""
    count = raw.size
    if order == 0:
        # Detrend by the average stride, rounded; modular arithmetic keeps any column exact.
        step = round((int(raw[-1].view(np.int64)) - int(raw[0].view(np.int64))) / (count - 1))
        param = _signed(step)
        residual = (raw - np.arange(count, dtype=np.uint64) * np.uint64(param & MASK64))[None, :]
    else:
        anchors, residual = difference(raw[None, :], order)
        param = _signed(int(anchors[1][0])) if order == 2 else 0
    reference, shifted, maxima = frame_of_reference(residual)
    return param, shifted, int(reference[0]), int(width_codes(maxima)[0])


def timestamps_header(blob: bytes | memoryview) -> TimestampsInfo:
    """Read t0, step, count, tmin and tmax from a timestamp blob without decoding its payload."""
    if len(blob) < 1:
        raise CorruptBlobError("empty timestamp blob")
    kind = blob[0]
    if kind == _REGULAR:
        if len(blob) != _REGULAR_HEADER.size:
            raise CorruptBlobError(f"regular timestamp blob must be {_REGULAR_HEADER.size} bytes, got {len(blob)}")
        _, count, t0, step = _REGULAR_HEADER.unpack_from(blob)
        last = t0 + step * max(count - 1, 0)
        if not INT64_MIN <= last <= INT64_MAX:
            raise CorruptBlobError("regular timestamp blob runs past int64")
        return TimestampsInfo(t0=t0, step=step, count=count, tmin=min(t0, last), tmax=max(t0, last), regular=True)
    if kind == _IRREGULAR:
        if len(blob) < _IRREGULAR_HEADER.size:
            raise CorruptBlobError(f"irregular timestamp blob shorter than its {_IRREGULAR_HEADER.size}-byte header")
        _, count, t0, tmin, tmax, *_ = _IRREGULAR_HEADER.unpack_from(blob)
        return TimestampsInfo(t0=t0, step=0, count=count, tmin=tmin, tmax=tmax, regular=False)
    raise CorruptBlobError(f"unknown timestamp blob kind {kind}")


def decode_timestamps(blob: bytes | memoryview) -> I64:
    """Decode a blob from encode_timestamps back into its int64 column (a fresh, writable array)."""
    info = timestamps_header(blob)
    count = info.count
    if info.regular:
        steps = np.arange(count, dtype=np.uint64) * np.uint64(info.step & MASK64)
        steps += np.uint64(info.t0 & MASK64)
        return steps.view(np.int64)
    _, _, t0, _, _, mode, code, param, reference = _IRREGULAR_HEADER.unpack_from(blob)
    order, shuffle = mode & 0xF, bool(mode >> 4)
    if order > 2 or mode >> 5 or count <= order or code >= len(WIDTHS):
        raise CorruptBlobError(f"irregular timestamp blob with mode {mode}, width code {code}, count {count}")
    width = WIDTHS[code]
    length = count - order
    frame = memoryview(blob)[_IRREGULAR_HEADER.size :]
    if width == 0 and len(frame):
        raise CorruptBlobError("irregular timestamp blob of width 0 carries a payload")
    payload = decompress(frame, length * width) if width else b""
    shifted = unpack(payload, 0, 1, length, width, shuffle)
    ref = np.array([reference & MASK64], dtype=np.uint64)
    if order == 0:
        out: I64 = (
            integrate(shifted, ref, [], count)[0] + np.arange(count, dtype=np.uint64) * np.uint64(param & MASK64)
        ).view(np.int64)
    else:
        anchors: list[U64] = [np.array([t0 & MASK64], dtype=np.uint64)]
        if order == 2:
            anchors.append(np.array([param & MASK64], dtype=np.uint64))
        out = integrate(shifted, ref, anchors, count)[0].view(np.int64)
    if int(out[0]) != t0 or int(out.min()) != info.tmin or int(out.max()) != info.tmax:
        raise CorruptBlobError("decoded timestamps disagree with the header's t0/tmin/tmax")
    return out

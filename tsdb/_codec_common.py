"""Pieces shared by the timestamp and value codecs: errors, zstd contexts, integer packing.

The zstd helpers also write and read the segment metadata frame (tsdb.segment_writer / reader).

All integer arithmetic here is modular (uint64 wrap-around), so differencing and re-summing is a
bijection on any int64 sequence: the codecs never overflow, they only wrap and unwrap.
"""

from __future__ import annotations

import threading
from typing import Final

import numpy as np
import zstandard
from numpy.typing import NDArray

from tsdb.errors import CorruptSegmentError, InvalidArgumentError, TsdbError

U64 = NDArray[np.uint64]
I64 = NDArray[np.int64]
U8 = NDArray[np.uint8]

# Width codes stored in blobs: index -> bytes per packed integer (0: every residual is zero).
WIDTHS: Final = (0, 1, 2, 4, 8)
# Explicitly little-endian so blobs read the same on any host.
_WIDTH_DTYPES: Final[dict[int, np.dtype[np.unsignedinteger]]] = {
    1: np.dtype("<u1"),
    2: np.dtype("<u2"),
    4: np.dtype("<u4"),
    8: np.dtype("<u8"),
}
_WIDTH_LIMITS: Final = np.array([0, 0xFF, 0xFFFF, 0xFFFF_FFFF], dtype=np.uint64)
MASK64: Final = (1 << 64) - 1


class CodecError(TsdbError):
    """Base of every error raised by the tsdb codecs."""


class CodecInputError(CodecError, InvalidArgumentError):
    """An argument the codecs cannot encode: wrong shape or dtype, too many rows or samples, bad level."""


class CorruptBlobError(CodecError, CorruptSegmentError):
    """Bytes that are not a valid codec blob: truncated, unknown kind or version, inconsistent payload.

    A CorruptSegmentError too, since blobs live inside segment files."""


_local = threading.local()


def check_level(level: int) -> None:
    """Reject zstd levels the library would silently clamp, so a typo does not go unnoticed."""
    if isinstance(level, bool) or not isinstance(level, int) or not -7 <= level <= zstandard.MAX_COMPRESSION_LEVEL:
        raise CodecInputError(f"zstd level must be an int in [-7, {zstandard.MAX_COMPRESSION_LEVEL}], got {level!r}")


def compress(data: bytes | bytearray | memoryview, level: int) -> bytes:
    """One zstd frame (content size recorded, no checksum: segment files carry their own CRC)."""
    # Compressor objects are not safe to share between threads; one cached set per thread avoids
    # paying their construction on every small block.
    cache: dict[int, zstandard.ZstdCompressor] | None = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    compressor = cache.get(level)
    if compressor is None:
        compressor = cache[level] = zstandard.ZstdCompressor(
            level=level, write_checksum=False, write_content_size=True, write_dict_id=False
        )
    return compressor.compress(data)


def decompress(frame: bytes | memoryview, expected: int, *, at_most: bool = False) -> bytes:
    """Decompress one frame whose content must be exactly `expected` bytes (at most, with at_most)."""
    decompressor: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = _local.decompressor = zstandard.ZstdDecompressor()
    try:
        if at_most and not 0 <= zstandard.frame_content_size(frame) <= expected:
            raise CorruptBlobError(f"zstd frame content size is not within the {expected} bytes a blob can hold")
        out = decompressor.decompress(frame, max_output_size=expected)
    except zstandard.ZstdError as exc:
        raise CorruptBlobError(f"zstd frame does not decompress: {exc}") from exc
    if len(out) > expected or (len(out) != expected and not at_most):
        raise CorruptBlobError(f"zstd frame holds {len(out)} bytes, header promises {expected}")
    return out


def width_codes(maxima: U64) -> NDArray[np.intp]:
    """Per value, the code (index into WIDTHS) of the narrowest unsigned width that holds it."""
    codes: NDArray[np.intp] = np.searchsorted(_WIDTH_LIMITS, maxima, side="left")
    return codes


def width_dtype(width: int) -> np.dtype[np.unsignedinteger]:
    """The little-endian unsigned dtype of a nonzero packed width."""
    return _WIDTH_DTYPES[width]


def difference(values: U64, order: int) -> tuple[list[U64], U64]:
    """Difference `order` times along the last axis: the first column of each stage, and the rest.

    values has shape (g, m) with m > order; the result has shape (g, m - order).
    """
    anchors: list[U64] = []
    current = values
    for _ in range(order):
        anchors.append(current[:, 0].copy())
        current = current[:, 1:] - current[:, :-1]
    return anchors, current


def frame_of_reference(residual: U64) -> tuple[I64, U64, U64]:
    """Subtract each row's signed minimum: (reference, shifted rows, per-row maximum of the shifted rows)."""
    if residual.shape[1] == 0:
        zeros = np.zeros(residual.shape[0], dtype=np.uint64)
        return zeros.view(np.int64), residual, zeros
    reference: I64 = residual.view(np.int64).min(axis=1)
    shifted: U64 = residual - reference.view(np.uint64)[:, None]
    return reference, shifted, shifted.max(axis=1)


def integrate(shifted: NDArray[np.unsignedinteger], reference: U64, anchors: list[U64], length: int) -> U64:
    """Invert frame_of_reference and difference: rows of `length` integers from packed residuals.

    anchors[j] has shape (g,); shifted has shape (g, length - len(anchors)).
    """
    order = len(anchors)
    out = np.empty((shifted.shape[0], length), dtype=np.uint64)
    body = out[:, order:]
    np.add(shifted, reference[:, None], out=body, casting="unsafe")
    for stage in range(order - 1, -1, -1):
        out[:, stage] = anchors[stage]
        tail = out[:, stage:]
        np.cumsum(tail, axis=1, out=tail)
    return out


def pack(shifted: U64, width: int, shuffle: bool) -> bytes:
    """Narrow residuals that all fit `width` bytes, row by row; width 0 packs to nothing.

    shuffle stores each row plane by plane (all low bytes, then the next byte...): noisy multi-byte
    residuals compress about 20% smaller that way because zstd sees each byte plane's own statistics.
    """
    if width == 0:
        return b""
    narrow = shifted.astype(_WIDTH_DTYPES[width])
    if not shuffle or width == 1:
        return narrow.tobytes()
    rows, length = narrow.shape
    return narrow.view(np.uint8).reshape(rows, length, width).transpose(0, 2, 1).tobytes()


def unpack(
    buffer: bytes, offset: int, rows: int, length: int, width: int, shuffle: bool, picked: list[int] | None = None
) -> NDArray[np.unsignedinteger]:
    """Invert pack for `rows` rows of `length` residuals starting at `offset` in buffer; only the
    `picked` rows (indices into those rows) when given."""
    count = rows if picked is None else len(picked)
    if width == 0:
        return np.broadcast_to(np.uint8(0), (count, length))
    dtype = _WIDTH_DTYPES[width]
    if not shuffle or width == 1:
        packed = np.frombuffer(buffer, dtype=dtype, count=rows * length, offset=offset).reshape(rows, length)
        return packed if picked is None else packed[picked]
    planes = np.frombuffer(buffer, dtype=np.uint8, count=rows * length * width, offset=offset)
    planes = planes.reshape(rows, width, length)
    if picked is not None:
        planes = planes[picked]
    joined = np.empty((count, length), dtype=dtype)
    # One strided copy per plane is about 5x faster than numpy's general transpose of the whole array.
    target = joined.view(np.uint8).reshape(count, length, width)
    for plane in range(width):
        target[:, :, plane] = planes[:, plane, :]
    return joined

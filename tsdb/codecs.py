"""Compression codecs of the tsdb segment files: timestamp columns and blocks of value rows.

Both produce self-describing byte blobs that round-trip bit for bit (NaN payloads, -0.0, inf and
subnormals included); every function is vectorised with numpy, with no per-sample Python loop.

- encode_timestamps / decode_timestamps / timestamps_header: an int64 millisecond column; a constant
  stride costs a 21-byte header and nothing else.
- encode_values / decode_values / decode_value_rows / decode_value_row: a (rows, n) float64 block (typically one field
  across a node's 8 GPUs) in one zstd frame, each row coded CONST, DECIMAL(k), PATCHED (decimal but for
  rare NaN/inf/-0.0 values, kept as exceptions) or XOR, whichever fits. decode_value_row rebuilds a
  slice of one row only (the narrow query's path); encode_value_blocks codes many blocks of one
  matrix at once (the segment writer's path).

The formats are described in tsdb/_codec_timestamps.py and tsdb/_codec_values.py.
"""

from __future__ import annotations

from tsdb._codec_common import CodecError, CodecInputError, CorruptBlobError
from tsdb._codec_timestamps import TimestampsInfo, decode_timestamps, encode_timestamps, timestamps_header
from tsdb._codec_values import (
    CONST,
    DECIMAL,
    PATCHED,
    XOR,
    decode_value_row,
    decode_value_rows,
    decode_values,
    encode_value_blocks,
    encode_values,
    row_kinds,
)

__all__ = [
    "CONST",
    "DECIMAL",
    "PATCHED",
    "XOR",
    "CodecError",
    "CodecInputError",
    "CorruptBlobError",
    "TimestampsInfo",
    "decode_timestamps",
    "decode_value_row",
    "decode_value_rows",
    "decode_values",
    "encode_timestamps",
    "encode_value_blocks",
    "encode_values",
    "row_kinds",
    "timestamps_header",
]

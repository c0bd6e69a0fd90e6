"""How many bytes a query's answer takes on the wire, bounded from above before it is built.

The points cap alone does not bound an answer: labels travel once per series, and 7,500
one-point series with long labels make megabytes from a few thousand points. The estimate
follows the protobuf encoding of ``QueryResponse`` (metrics.proto): every label and frame
exactly, the timestamps' varints exactly over the whole answer, and only the length prefix of
each series' packed timestamps taken at its widest, so the encoded answer is never larger.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from services.metrics.samples import SeriesData

# QueryStats: eight int64 counters, each a tag and a varint of at most 10 bytes, framed.
_STATS = 2 + 8 * (1 + 10)
# A varint takes one byte per 7 bits; these are the values that need one byte more.
_VARINT_STEPS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def _varint(n: int) -> int:
    """Bytes of ``n`` (not negative) as a varint."""
    return max(1, (n.bit_length() + 6) // 7)


def _field(size: int) -> int:
    """Bytes of a length-delimited field of ``size`` bytes: its tag, its length and itself."""
    return 1 + _varint(size) + size


def answer_bytes(series: Sequence[SeriesData]) -> int:
    """An upper bound on the encoded size of a query response carrying ``series``."""
    total = _STATS
    for s in series:
        body = 0
        for key, value in s.labels.items():
            body += _field(_field(len(key.encode())) + _field(len(value.encode())))
        points = len(s.timestamps_ms)
        if points:
            # The packed timestamps' tag and widest length prefix (their bytes are added below),
            # and the packed values.
            body += 1 + _varint(10 * points) + _field(8 * points)
        total += 1 + _varint(body + 10 * points) + body
    if series:
        stamps = np.concatenate([s.timestamps_ms for s in series]).view(np.uint64)
        # int64 varints: a negative one takes 10 bytes, as its unsigned twin does.
        total += int(stamps.size) + sum(int(np.count_nonzero(stamps >= step)) for step in _VARINT_STEPS)
    return total

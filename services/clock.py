"""Time as the control plane stores it: integer microseconds since the Unix epoch, UTC."""

from __future__ import annotations

import time


def now_us() -> int:
    """The current wall-clock time in microseconds."""
    return time.time_ns() // 1_000

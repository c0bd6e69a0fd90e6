"""The int64 range, as Python ints: timestamps and series ids are int64 throughout the store."""

from __future__ import annotations

from typing import Final

INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1

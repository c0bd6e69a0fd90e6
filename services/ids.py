"""Ids of the resources the control plane creates: a type prefix, then time-ordered hex.

``alloc-0193a1b2c3d4e5f60718293a4b5c``: 12 hex digits of creation time in milliseconds, then 16
of randomness from the OS (64 bits, so an id stays hard to guess). It is the
idea of ULID and UUIDv7: ids made later sort later, so every b-tree keyed by one (the
allocations and operations tables, assignments, and the usage events, whose ids start with
their allocation's) takes new rows at its right edge, on pages already in the cache, instead
of on a random page each. On SQLite that means fewer WAL frames per create and cheaper
inserts (docs/performance.md). A clock that steps back costs only that locality, never
uniqueness.
"""

from __future__ import annotations

import os
from time import time_ns


def new_id(prefix: str) -> str:
    """A new id ``<prefix>-<12 hex of ms time><16 random hex>``."""
    # os.urandom, which secrets.token_hex calls through three layers of Python.
    return f"{prefix}-{time_ns() // 1_000_000:012x}{os.urandom(8).hex()}"

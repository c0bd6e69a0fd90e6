"""The request ids the client makes up for creates: UUIDv7 (RFC 9562).

A UUIDv7 starts with the time in milliseconds and ends with 74 random bits. It is as unique
and as unguessable as a UUID4 for idempotency, and ids made later sort later, so the server's
idempotency-key index takes each new key at its right edge instead of on a random page, which
makes the key's insert and lookup cheaper (docs/performance.md). Python has ``uuid.uuid7`` only
from 3.14.
"""

from __future__ import annotations

import os
import time

_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0x2 << 62


def new_request_id() -> str:
    """A fresh UUIDv7 as text: 48 bits of ms time, version 7, 74 random bits, RFC variant."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    value = (value & ~(0xF << 76)) | _VERSION_7
    value = (value & ~(0x3 << 62)) | _VARIANT_RFC
    digits = f"{value:032x}"  # str(uuid.UUID(int=value)), without building the UUID
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"

"""States of an allocation: PENDING -> ACTIVE -> CANCELLING -> CANCELLED, and PENDING ->
CANCELLED for a cancel before admission; nothing else moves."""

from __future__ import annotations

from enum import StrEnum


class AllocationState(StrEnum):
    """The state of an allocation, as ``allocations.state`` stores it."""

    PENDING = "PENDING"
    ACTIVE = "ACTIVE"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"

"""States of an allocation. ACTIVE -> CANCELLING -> CANCELLED; nothing else moves."""

from __future__ import annotations

from enum import StrEnum


class AllocationState(StrEnum):
    """The state of an allocation, as ``allocations.state`` stores it."""

    ACTIVE = "ACTIVE"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"

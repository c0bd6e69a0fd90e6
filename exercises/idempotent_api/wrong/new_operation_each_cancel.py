"""A cancel that starts a new operation every time it is called: a client retrying a cancel
whose reply it lost holds two operation names for one release, and polls the wrong one."""

from __future__ import annotations

import itertools

from exercises.idempotent_api.wrong import _base
from exercises.idempotent_api.wrong._base import Allocation, Operation, Page, Place, RequestIdReused

__all__ = ["Allocation", "AllocationService", "Operation", "Page", "RequestIdReused"]


class AllocationService(_base.AllocationService):
    """Wrong: an operation per cancel call rather than per allocation."""

    def __init__(self, place: Place) -> None:
        super().__init__(place)
        self._calls = itertools.count(1)

    async def cancel(self, allocation_id: str) -> Operation:
        """A new operation on every call."""
        _, allocation = self._allocations[allocation_id]
        operation = Operation(f"operations/cancel-{next(self._calls)}", allocation.allocation_id, done=True)
        self._operations[operation.name] = operation
        return operation

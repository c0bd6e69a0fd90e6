"""A request id recorded only once its allocation exists: two copies of one request that
arrive together both find the id unused, both await the placement, and the tenant holds (and
pays for) two allocations."""

from __future__ import annotations

import asyncio

from exercises.idempotent_api.wrong import _base
from exercises.idempotent_api.wrong._base import Allocation, Operation, Page, RequestIdReused

__all__ = ["Allocation", "AllocationService", "Operation", "Page", "RequestIdReused"]


class AllocationService(_base.AllocationService):
    """Wrong: check the id, await the placement, then record the id (check-then-act)."""

    async def create(self, request_id: str, gpu_model: str, node_count: int) -> Allocation:
        """A retry after the first call returned is answered; one that came meanwhile places again."""
        request = (gpu_model, node_count)
        claimed = self._keys.get(request_id)
        if claimed is not None:
            if claimed[0] != request:
                raise RequestIdReused(f"{request_id!r} was first used for {claimed[0]}")
            return await claimed[1]
        allocation = await self._place(gpu_model, node_count)
        done: asyncio.Future[Allocation] = asyncio.get_running_loop().create_future()
        done.set_result(allocation)
        self._keys[request_id] = (request, done)
        return allocation

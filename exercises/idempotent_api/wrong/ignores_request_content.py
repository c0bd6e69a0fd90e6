"""A request id looked up by itself: a second request with the same id but another GPU model or
node count gets the first request's allocation, and the caller never learns that its request
was not carried out."""

from __future__ import annotations

import asyncio

from exercises.idempotent_api.wrong import _base
from exercises.idempotent_api.wrong._base import Allocation, Operation, Page, RequestIdReused

__all__ = ["Allocation", "AllocationService", "Operation", "Page", "RequestIdReused"]


class AllocationService(_base.AllocationService):
    """Wrong: the request is not compared with the one the id was first used for."""

    async def create(self, request_id: str, gpu_model: str, node_count: int) -> Allocation:
        """Any call with a known id answers with that id's allocation."""
        claimed = self._keys.get(request_id)
        if claimed is not None:
            return await asyncio.shield(claimed[1])
        return await super().create(request_id, gpu_model, node_count)

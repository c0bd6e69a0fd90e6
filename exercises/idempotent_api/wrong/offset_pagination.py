"""A page token that is an offset into the newest-first listing: an allocation made while a
client pages lands at the front, shifts every offset by one, and the next page repeats one."""

from __future__ import annotations

from exercises.idempotent_api.wrong import _base
from exercises.idempotent_api.wrong._base import Allocation, Operation, Page, RequestIdReused

__all__ = ["Allocation", "AllocationService", "Operation", "Page", "RequestIdReused"]


class AllocationService(_base.AllocationService):
    """Wrong: LIMIT/OFFSET paging."""

    async def list_page(self, page_size: int, page_token: str = "") -> Page:
        """The ``page_size`` allocations from the offset in the token on."""
        offset = int(page_token) if page_token else 0
        newest_first = [a for _, a in sorted(self._allocations.values(), key=lambda e: e[0], reverse=True)]
        page = newest_first[offset : offset + page_size]
        more = offset + page_size < len(newest_first)
        return Page(page, str(offset + page_size) if more else "")

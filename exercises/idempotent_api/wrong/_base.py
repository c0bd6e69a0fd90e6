"""A one-file answer that passes the suite, as a candidate might write it, in memory. Each
known-wrong answer beside it changes one rule of this one, so that the suite's verdict on it is
about that rule alone."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Place = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True)
class Allocation:
    """A tenant's hold on whole nodes of one GPU model."""

    allocation_id: str
    gpu_model: str
    node_count: int
    node_ids: tuple[str, ...]


@dataclass(frozen=True)
class Operation:
    """The cancel of ``allocation_id``."""

    name: str
    allocation_id: str
    done: bool


@dataclass(frozen=True)
class Page:
    """One page and the token of the next ("" on the last)."""

    items: list[Allocation]
    next_page_token: str


class RequestIdReused(Exception):
    """The request id was first used for a different request."""


class AllocationService:
    """Allocations newest first by a sequence number; each request id claimed, with the request
    it came with, before the placement is awaited."""

    def __init__(self, place: Place) -> None:
        self.place = place
        self._numbers = itertools.count(1)
        self._allocations: dict[str, tuple[int, Allocation]] = {}
        self._keys: dict[str, tuple[tuple[str, int], asyncio.Future[Allocation]]] = {}
        self._cancels: dict[str, Operation] = {}
        self._operations: dict[str, Operation] = {}

    async def create(self, request_id: str, gpu_model: str, node_count: int) -> Allocation:
        """The first call with a request id places; the others wait for its allocation."""
        request = (gpu_model, node_count)
        claimed = self._keys.get(request_id)
        if claimed is not None:
            if claimed[0] != request:
                raise RequestIdReused(f"{request_id!r} was first used for {claimed[0]}, not {request}")
            return await asyncio.shield(claimed[1])
        result: asyncio.Future[Allocation] = asyncio.get_running_loop().create_future()
        self._keys[request_id] = (request, result)
        try:
            allocation = await self._place(gpu_model, node_count)
        except BaseException as error:
            # Not recorded: a retry may succeed. The duplicates waiting meanwhile get the error.
            del self._keys[request_id]
            result.set_exception(error)
            result.exception()
            raise
        result.set_result(allocation)
        return allocation

    async def _place(self, gpu_model: str, node_count: int) -> Allocation:
        """Await the placement and record the allocation it made."""
        nodes = await self.place(gpu_model, node_count)
        number = next(self._numbers)
        allocation = Allocation(f"alloc-{number:06d}", gpu_model, node_count, tuple(nodes))
        self._allocations[allocation.allocation_id] = (number, allocation)
        return allocation

    async def cancel(self, allocation_id: str) -> Operation:
        """The allocation's one cancel operation, made on the first cancel (its nodes come back at once)."""
        operation = self._cancels.get(allocation_id)
        if operation is None:
            _, allocation = self._allocations[allocation_id]
            operation = Operation(f"operations/cancel-{allocation.allocation_id}", allocation_id, done=True)
            self._cancels[allocation_id] = self._operations[operation.name] = operation
        return operation

    async def get_operation(self, name: str) -> Operation:
        """The operation by name."""
        return self._operations[name]

    async def list_page(self, page_size: int, page_token: str = "") -> Page:
        """Newest first, after the number in the token: an allocation made since then has a
        higher number, so it lands before the cursor, not on the next page."""
        after = int(page_token) if page_token else None
        newest_first = sorted(self._allocations.values(), key=lambda entry: entry[0], reverse=True)
        left = [(n, a) for n, a in newest_first if after is None or n < after]
        page = left[:page_size]
        token = str(page[-1][0]) if len(left) > page_size else ""
        return Page([a for _, a in page], token)

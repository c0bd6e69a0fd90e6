"""Request ids, cancel as an operation, a cursor that survives inserts: write
``AllocationService``'s methods; `gpucloud exercises check idempotent-api --impl THIS_FILE` runs
the suite (a method left raising NotImplementedError fails only the cases that call it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

# The scheduler: the nodes it chose for (gpu_model, node_count). It awaits, as a database or a
# scheduler does, and other requests run meanwhile.
Place = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True)
class Allocation:
    """A tenant's hold on ``node_count`` whole nodes of one GPU model."""

    allocation_id: str
    gpu_model: str
    node_count: int
    node_ids: tuple[str, ...]


@dataclass(frozen=True)
class Operation:
    """A long-running operation: the cancel of ``allocation_id``, ``done`` once its nodes are back."""

    name: str
    allocation_id: str
    done: bool


@dataclass(frozen=True)
class Page:
    """One page of a listing; ``next_page_token`` asks for the next ("" on the last page)."""

    items: list[Allocation]
    next_page_token: str


class RequestIdReused(Exception):
    """The request id was first used for a different request."""


class AllocationService:
    """One tenant's allocations, placed by ``place``."""

    def __init__(self, place: Place) -> None:
        self.place = place

    async def create(self, request_id: str, gpu_model: str, node_count: int) -> Allocation:
        """Place and record a new allocation; the same ``request_id`` again returns the first
        call's allocation, and RequestIdReused if the request differs."""
        raise NotImplementedError

    async def cancel(self, allocation_id: str) -> Operation:
        """Start releasing the allocation's nodes: the operation that tracks it, the same one
        every time the allocation is cancelled."""
        raise NotImplementedError

    async def get_operation(self, name: str) -> Operation:
        """The operation ``name`` as it is now."""
        raise NotImplementedError

    async def list_page(self, page_size: int, page_token: str = "") -> Page:
        """Up to ``page_size`` allocations, newest first, from where ``page_token`` left off."""
        raise NotImplementedError

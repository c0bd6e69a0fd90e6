"""Batches of ``limit`` calls, each awaited whole before the next starts: never over the limit,
but every batch waits for its slowest call while the other slots sit idle."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from exercises.bounded_fan_out.wrong._base import R, T, check_limit, in_order, supervise

__all__ = ["fan_out"]


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """Wrong: the next item waits for the whole batch, not for a free slot."""
    check_limit(limit)
    results: dict[int, R] = {}

    async def call(index: int) -> None:
        results[index] = await work(items[index])

    async with asyncio.timeout(deadline_s):
        for start in range(0, len(items), limit):
            batch = range(start, min(start + limit, len(items)))
            await supervise([asyncio.create_task(call(index)) for index in batch], None)
    return in_order(results, len(items))

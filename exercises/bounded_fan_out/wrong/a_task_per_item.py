"""A task per item, each holding a semaphore across its call: never more than ``limit`` calls
in flight, but 10,000 items are 10,000 tasks alive at once, waiting on the semaphore."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from exercises.bounded_fan_out.wrong._base import R, T, check_limit, in_order, supervise

__all__ = ["fan_out"]


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """Wrong: the limit bounds the calls, not the tasks."""
    check_limit(limit)
    results: dict[int, R] = {}
    slots = asyncio.Semaphore(limit)

    async def call(index: int) -> None:
        async with slots:
            results[index] = await work(items[index])

    await supervise([asyncio.create_task(call(index)) for index in range(len(items))], deadline_s)
    return in_order(results, len(items))

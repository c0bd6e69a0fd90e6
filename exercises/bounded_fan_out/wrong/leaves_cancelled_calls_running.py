"""Workers cancelled but not awaited: ``cancel()`` only asks, so when fan_out raises, the calls
it cancelled are still running, and may still write, after the caller moved on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from exercises.bounded_fan_out.wrong._base import R, T, check_limit, in_order, start_workers

__all__ = ["fan_out"]


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """Wrong: the workers are cancelled and left to end whenever they do."""
    check_limit(limit)
    results: dict[int, R] = {}
    workers = start_workers(items, work, results, min(limit, len(items)))
    try:
        async with asyncio.timeout(deadline_s):
            for finished in asyncio.as_completed(workers):
                await finished
    finally:
        for task in workers:
            task.cancel()
    return in_order(results, len(items))

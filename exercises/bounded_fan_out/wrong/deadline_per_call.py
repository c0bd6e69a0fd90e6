"""The deadline applied to each call: every call ends in time, yet 10,000 of them, ``limit`` at
a time, run far past the deadline the caller gave the whole fan-out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from exercises.bounded_fan_out.wrong._base import R, T, check_limit, in_order, supervise

__all__ = ["fan_out"]


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """Wrong: ``asyncio.timeout(deadline_s)`` around each call instead of around them all."""
    check_limit(limit)
    results: dict[int, R] = {}
    indexes = iter(range(len(items)))

    async def worker() -> None:
        for index in indexes:
            async with asyncio.timeout(deadline_s):
                results[index] = await work(items[index])

    await supervise([asyncio.create_task(worker()) for _ in range(min(limit, len(items)))], None)
    return in_order(results, len(items))

"""Workers cancelled when a call fails or the deadline passes, but not when the fan-out itself
is cancelled: its caller gave up, and its calls run on, unowned, holding their slots."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from exercises.bounded_fan_out.wrong._base import R, T, check_limit, in_order, start_workers

__all__ = ["fan_out"]


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """Wrong: the workers are cleaned up on ``Exception`` only; CancelledError is not one."""
    check_limit(limit)
    results: dict[int, R] = {}
    workers = start_workers(items, work, results, min(limit, len(items)))
    try:
        async with asyncio.timeout(deadline_s):
            for finished in asyncio.as_completed(workers):
                await finished
    except Exception:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    return in_order(results, len(items))

"""A failure stops only the worker whose call failed: the others run every item left, and the
failure is raised once all have ended. A wrong operator token fails 10,000 times, not once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from exercises.bounded_fan_out.wrong._base import R, T, check_limit, in_order, start_workers

__all__ = ["fan_out"]


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """Wrong: every worker is waited for, failed or not, before the first failure is raised."""
    check_limit(limit)
    results: dict[int, R] = {}
    workers = start_workers(items, work, results, min(limit, len(items)))
    try:
        async with asyncio.timeout(deadline_s):
            ended = await asyncio.gather(*workers, return_exceptions=True)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    for outcome in ended:
        if isinstance(outcome, BaseException):
            raise outcome
    return in_order(results, len(items))

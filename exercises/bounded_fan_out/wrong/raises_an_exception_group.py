"""The workers in an asyncio.TaskGroup, which cancels the rest on the first failure, as it
should, and raises an ExceptionGroup: the caller's ``except PermissionDenied`` never matches."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from exercises.bounded_fan_out.wrong._base import R, T, check_limit, in_order, start_workers

__all__ = ["fan_out"]


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """Wrong: the task group's ExceptionGroup is raised as it is."""
    check_limit(limit)
    results: dict[int, R] = {}
    async with asyncio.timeout(deadline_s), asyncio.TaskGroup() as group:
        start_workers(items, work, results, min(limit, len(items)), spawn=group.create_task)
    return in_order(results, len(items))

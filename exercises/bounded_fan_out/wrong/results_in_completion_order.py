"""Results appended as the calls end: the right results, in the order they came back rather than
the items' order, so the caller pairs node 17's token with node 3."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from exercises.bounded_fan_out.wrong._base import R, T, check_limit, supervise

__all__ = ["fan_out"]


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """Wrong: the workers append each result as it arrives."""
    check_limit(limit)
    results: list[R] = []
    remaining = iter(items)

    async def worker() -> None:
        for item in remaining:
            results.append(await work(item))

    await supervise([asyncio.create_task(worker()) for _ in range(min(limit, len(items)))], deadline_s)
    return results

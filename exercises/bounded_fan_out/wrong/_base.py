"""A one-file answer that passes the suite, as a candidate might write it: ``limit`` worker
tasks taking the items' indexes from one shared iterator, and a supervisor that waits for them.
Each known-wrong answer beside it changes one rule of this one, so that the suite's verdict on it
is about that rule alone."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")
Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """``limit`` workers (fewer for fewer items), supervised; the results by index."""
    check_limit(limit)
    results: dict[int, R] = {}
    workers = start_workers(items, work, results, min(limit, len(items)))
    await supervise(workers, deadline_s)
    return in_order(results, len(items))


def check_limit(limit: int) -> None:
    """The refusal every answer shares: fewer than one call at a time could never finish."""
    if limit < 1:
        raise ValueError(f"limit must be 1 or more, not {limit}")


def in_order(results: dict[int, R], count: int) -> list[R]:
    """The results by item index, as the caller's items were ordered."""
    return [results[index] for index in range(count)]


def start_workers(
    items: Sequence[T],
    work: Callable[[T], Awaitable[R]],
    results: dict[int, R],
    count: int,
    spawn: Spawn = asyncio.create_task,
) -> list[asyncio.Task[None]]:
    """``count`` tasks, each calling ``work`` on the next index nobody has taken, until none is left."""
    indexes = iter(range(len(items)))

    async def worker() -> None:
        for index in indexes:  # shared: each index goes to one worker
            results[index] = await work(items[index])

    return [spawn(worker()) for _ in range(count)]


async def supervise(workers: list[asyncio.Task[None]], deadline_s: float | None) -> None:
    """Wait for every worker. The first to fail raises its call's exception, and the deadline
    raises TimeoutError; either way, and when the fan-out itself is cancelled, every worker is
    cancelled and awaited before anything is raised."""
    try:
        async with asyncio.timeout(deadline_s):
            for finished in asyncio.as_completed(workers):
                await finished
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

"""Bounded fan-out: one call per item, a few at a time, all or nothing.

Minting an agent token for each of 10,000 nodes is 10,000 calls. Sent all at once they would
queue on the server past their deadlines; sent one by one they take minutes. ``fan_out`` keeps
``limit`` calls in flight and answers in the items' order. The first failure cancels the calls
still running and those not started, and is raised once they have all ended: a wrong operator
token fails once, not 10,000 times. A deadline over the whole fan-out does the same with
``TimeoutError``. Nothing started is left running when ``fan_out`` returns or raises, when it is
cancelled itself included.

``limit`` workers take the items' indexes from one shared iterator, so 10,000 items cost
``limit`` tasks, not 10,000.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """``work(item)`` for every item, at most ``limit`` at once; the results in the items' order.

    Raises the first exception a call raised (the others are cancelled and awaited first), or
    ``TimeoutError`` when ``deadline_s`` passes before every call has ended."""
    if limit < 1:
        raise ValueError(f"limit must be 1 or more, not {limit}")
    if deadline_s is not None and not deadline_s > 0:
        raise ValueError(f"deadline_s must be above 0, not {deadline_s}")
    results: dict[int, R] = {}
    indexes = iter(range(len(items)))
    failures: list[BaseException] = []

    async def worker() -> None:
        for index in indexes:  # shared: each index is taken by one worker
            try:
                results[index] = await work(items[index])
            except Exception as error:
                failures.append(error)
                raise

    try:
        async with asyncio.timeout(deadline_s), asyncio.TaskGroup() as group:
            for _ in range(min(limit, len(items))):
                group.create_task(worker())
    except BaseExceptionGroup:
        if not failures:
            raise  # not a call's failure: the group as the task group raised it
        # The first call to fail, not the group: the others failed after it, or were cancelled.
        raise failures[0] from None
    return [results[index] for index in range(len(items))]

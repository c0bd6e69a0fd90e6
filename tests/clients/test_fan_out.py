"""Bounded fan-out: results in order, never more than the limit in flight, the first failure
or the deadline cancels the rest, and no task outlives the call."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from clients.fan_out import fan_out
from tests.conftest import until


class Work:
    """Calls that record how many run at once, which items started, and which tasks ran them."""

    def __init__(self, *, failing: int | None = None, blocking: bool = False) -> None:
        self.failing = failing
        self.blocking = blocking
        self.running = 0
        self.most = 0
        self.started: list[int] = []
        self.cancelled: list[int] = []
        self.tasks: set[asyncio.Task[Any]] = set()
        self.never = asyncio.Event()

    async def __call__(self, item: int) -> int:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.started.append(item)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            for _ in range(item % 5):
                await asyncio.sleep(0)  # a yield to the loop, so that calls interleave
            if item == self.failing:
                raise LookupError(f"item {item}")
            if self.blocking:
                await self.never.wait()
            return item * 2
        except asyncio.CancelledError:
            self.cancelled.append(item)
            raise
        finally:
            self.running -= 1


def other_tasks() -> set[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return {task for task in asyncio.all_tasks() if task is not current}


async def test_ten_thousand_items_answer_in_order_with_at_most_the_limit_in_flight() -> None:
    before = other_tasks()
    items = list(range(10_000))
    random.Random(7).shuffle(items)
    work = Work()
    assert await fan_out(items, work, limit=64) == [item * 2 for item in items]
    assert work.most == 64
    assert len(work.tasks) == 64  # workers take the items in turn: not a task per item
    assert sorted(work.started) == sorted(items)
    assert other_tasks() == before


async def test_the_first_failure_cancels_the_rest_and_is_raised_alone() -> None:
    before = other_tasks()
    work = Work(failing=30)
    with pytest.raises(LookupError, match="item 30"):
        await fan_out(list(range(1000)), work, limit=8)
    # The calls running when item 30 failed were cancelled; no item after them started.
    assert work.cancelled
    assert len(work.started) < 50
    assert work.running == 0
    assert other_tasks() == before


async def test_the_deadline_cancels_every_call_and_raises_timeout() -> None:
    before = other_tasks()
    work = Work(blocking=True)
    with pytest.raises(TimeoutError):
        await fan_out(list(range(100)), work, limit=10, deadline_s=0.05)
    assert sorted(work.cancelled) == list(range(10))
    assert work.started == list(range(10))
    assert other_tasks() == before


async def test_cancelling_the_fan_out_cancels_its_calls() -> None:
    before = other_tasks()
    work = Work(blocking=True)
    outer = asyncio.create_task(fan_out(list(range(100)), work, limit=5))
    await until(lambda: work.running == 5)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert sorted(work.cancelled) == list(range(5))
    assert other_tasks() == before


async def test_no_items_and_a_bad_limit() -> None:
    assert await fan_out([], Work(), limit=3) == []
    with pytest.raises(ValueError, match="limit must be 1 or more, not 0"):
        await fan_out([1], Work(), limit=0)
    with pytest.raises(ValueError, match="deadline_s must be above 0"):
        await fan_out([1], Work(), limit=1, deadline_s=0)

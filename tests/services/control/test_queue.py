"""WorkQueue: de-duplication, keys re-added while processed, priority, delays, backoff, shut down."""

from __future__ import annotations

import asyncio
import time

import pytest

from services.control.backoff import Backoff
from services.control.queue import PER_KEY_BACKOFF, QueueShutDown, WorkQueue
from tests.conftest import until

# asyncio runs a timer up to one clock tick early.
TICK_S = time.get_clock_info("monotonic").resolution


async def test_a_waiting_key_is_queued_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a", "a", "b"):
        queue.add(key)
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["a", "b"]
    assert len(queue) == 0


async def test_critical_keys_come_first_and_critical_raises_a_waiting_key() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "c"):
        queue.add(key)
    queue.add("d", critical=True)
    queue.add("c", critical=True)
    queue.add("a")  # already waiting: keeps its place
    assert len(queue) == 4
    assert [await queue.get() for _ in range(4)] == ["d", "c", "a", "b"]


async def test_a_key_added_while_processed_comes_back_once_after_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0  # not handed out while a worker holds it
    queue.done("a")
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    assert len(queue) == 0  # not added meanwhile: not queued again


async def test_a_held_key_is_not_handed_to_a_second_worker() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("a")
    second = asyncio.create_task(queue.get())
    queue.add("b")
    assert await second == "b"
    queue.done("a")
    assert len(queue) == 1
    assert await queue.get() == "a"


async def test_a_critical_add_while_processed_requeues_it_ahead() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("b")
    queue.add("a", critical=True)
    queue.done("a")
    assert [await queue.get(), await queue.get()] == ["a", "b"]


def test_backoff_doubles_from_5_ms_and_caps_at_1000_s() -> None:
    backoff = PER_KEY_BACKOFF
    assert [backoff.delay_s(n) for n in range(5)] == [0.005, 0.01, 0.02, 0.04, 0.08]
    assert backoff.delay_s(17) == pytest.approx(655.36)
    assert backoff.delay_s(18) == 1000.0
    assert backoff.delay_s(100_000) == 1000.0
    assert Backoff(base_s=1, cap_s=3).delay_s(2) == 3


@pytest.mark.parametrize(("base_s", "cap_s"), [(0, 1), (-1, 1), (2, 1)])
def test_backoff_refuses_a_base_outside_zero_to_cap(base_s: float, cap_s: float) -> None:
    with pytest.raises(ValueError, match="base_s"):
        Backoff(base_s=base_s, cap_s=cap_s)


async def test_add_rate_limited_delays_by_the_growing_backoff() -> None:
    queue: WorkQueue[str] = WorkQueue(Backoff(base_s=0.001, cap_s=1000.0))
    loop = asyncio.get_running_loop()
    for failures in range(4):
        before = loop.time()
        delay = queue.add_rate_limited("a")
        after = loop.time()
        assert delay == 0.001 * 2**failures
        due = queue.due("a")
        assert due is not None
        assert before + delay <= due <= after + delay
        assert len(queue) == 0  # not before its delay
        assert await queue.get() == "a"
        assert loop.time() >= due - TICK_S
        assert queue.due("a") is None
        queue.done("a")
        assert queue.failures("a") == failures + 1


async def test_forget_resets_the_backoff() -> None:
    queue: WorkQueue[str] = WorkQueue(Backoff(base_s=0.001, cap_s=1000.0))
    for _ in range(3):
        queue.add_rate_limited("a")
    assert queue.failures("a") == 3
    queue.forget("a")
    assert queue.failures("a") == 0
    assert queue.failures("b") == 0
    assert await queue.get() == "a"
    queue.done("a")
    assert queue.add_rate_limited("a") == 0.001


async def test_add_after_keeps_the_earliest_time() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 60)
    late = queue.due("a")
    queue.add_after("a", 0.001)
    early = queue.due("a")
    queue.add_after("a", 30)
    assert late is not None
    assert early is not None
    assert early < late
    assert queue.due("a") == early
    assert await queue.get() == "a"
    queue.add_after("b", 0)  # no delay: added now
    assert len(queue) == 1


async def test_shut_down_wakes_every_getter_and_cancels_timers() -> None:
    queue: WorkQueue[str] = WorkQueue()
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0)  # one loop turn: each getter is now waiting
    assert not any(getter.done() for getter in getters)
    queue.add_after("a", 0.001)
    queue.shut_down()
    results = await asyncio.gather(*getters, return_exceptions=True)
    assert all(isinstance(result, QueueShutDown) for result in results)
    assert queue.shutting_down
    assert queue.due("a") is None
    queue.add("b")
    assert len(queue) == 0
    with pytest.raises(QueueShutDown):
        await queue.get()
    await queue.wait_shut_down()


async def test_a_getter_cancelled_after_its_wake_up_passes_the_key_on() -> None:
    queue: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)  # both wait; "first" is woken by the add below
    queue.add("a")
    first.cancel()
    await until(second.done)
    assert second.result() == "a"
    assert first.cancelled()

"""The bounded fan-out suite: calls that record when they start, yield, return, fail and are
cancelled, fanned out over random shapes from hypothesis and over 10,000 items, and the traps by
hand.

A call yields to the event loop (``asyncio.sleep(0)``) rather than sleeping, so that calls
interleave the same way on every run; only the deadline cases wait on the clock, for a fraction
of a second. A call that blocks waits until it is cancelled; a case gives a fan-out a bounded
number of turns of the loop to end, then releases what still blocks, so that a fan-out that
waits for its calls ends too and the case fails rather than hangs. Every case and every probe
runs in an event loop of its own, and no case runs longer than ``CAP_S``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exercises.harness import Implementation, Mistake, needs, under_test

impl = under_test()
T = TypeVar("T")
FAN_OUT = "fan_out"
# What a case may take at most before it fails as hung: far above what any passing fan-out takes.
CAP_S = 5.0
# How many turns of the event loop a fan-out gets to end once its calls have failed or been
# cancelled, or to fill its slots, before a case gives up waiting.
PATIENCE = 200
# The tasks a fan-out may keep alive besides its calls' (a supervisor, a timer), and how many per
# call in flight (one running the call, one it waits through): bounded by the limit, not the items.
SPARE_TASKS, TASKS_PER_CALL = 2, 2


class Refused(Exception):
    """What a failing call raises; the fan-out must raise this very object."""


def answer(item: int) -> int:
    """What the call for ``item`` returns."""
    return 10 * item + 1


class Calls:
    """The ``work`` a case fans out: ``await calls(item)``, recording what each call did.

    A call first yields ``yields[item]`` times (``default_yields`` for an item not listed); the
    call for ``failing`` then waits (a bounded number of turns) until ``slots`` calls are in
    flight and raises Refused; a ``blocking`` call waits until it is cancelled or ``release``d;
    one that ``sleeps_s`` waits that long; the call for ``slow`` waits until the calls for the
    ``count - 1`` other items have returned (a bounded number of turns). A call that does not
    fail returns ``answer(item)``."""

    def __init__(
        self,
        *,
        yields: dict[int, int] | None = None,
        default_yields: int = 1,
        failing: int | None = None,
        slots: int = 1,
        blocking: bool = False,
        sleeps_s: float = 0.0,
        slow: int | None = None,
        count: int = 0,
    ) -> None:
        self.yields = yields or {}
        self.default_yields = default_yields
        self.failing = failing
        self.slots = slots
        self.blocking = blocking
        self.sleeps_s = sleeps_s
        self.slow = slow
        self.count = count
        self.released = asyncio.Event()
        self.started: list[int] = []
        self.returned: list[int] = []
        self.cancelled: list[int] = []
        self.failures: list[Refused] = []
        self.started_after_failure: list[int] = []
        self.returned_after_failure: list[int] = []
        self.running = 0
        self.peak = 0
        self.peak_tasks = 0
        # What was still going on the moment fan_out returned or raised (``fan`` sets them).
        self.running_at_end = 0
        self.tasks_at_end: set[asyncio.Task[Any]] = set()

    def release(self) -> None:
        """Let every blocking call return."""
        self.released.set()

    async def __call__(self, item: int) -> int:
        self.started.append(item)
        if self.failures:
            self.started_after_failure.append(item)
        self.running += 1
        self.peak = max(self.peak, self.running)
        if len(self.started) % 500 == 1:  # a sample: counting the tasks costs one pass over them all
            self.peak_tasks = max(self.peak_tasks, len(asyncio.all_tasks()))
        try:
            return await self._answer(item)
        except asyncio.CancelledError:
            self.cancelled.append(item)
            raise
        finally:
            self.running -= 1

    async def _answer(self, item: int) -> int:
        for _ in range(self.yields.get(item, self.default_yields)):
            await asyncio.sleep(0)
        if item == self.failing:
            await turns_until(lambda: self.running >= self.slots)
            failure = Refused(f"the call for item {item}")
            self.failures.append(failure)
            raise failure
        if self.blocking:
            await self.released.wait()
        if self.sleeps_s:
            await asyncio.sleep(self.sleeps_s)
        if item == self.slow:
            await turns_until(lambda: len(self.returned) >= self.count - 1, turns=50 * self.count)
        self.returned.append(item)
        if self.failures:
            self.returned_after_failure.append(item)
        return answer(item)


async def turns_until(condition: Callable[[], bool], turns: int = PATIENCE) -> bool:
    """Yield to the loop until ``condition`` holds, at most ``turns`` times; whether it held."""
    for _ in range(turns):
        if condition():
            return True
        await asyncio.sleep(0)
    return condition()


async def fan(impl: Implementation, calls: Calls, items: Sequence[int], *, limit: int, **deadline: float) -> Any:
    """``fan_out(items, calls, limit=limit)``, noting what was still running, and which tasks it
    had started were still alive, the moment it returned or raised."""
    before = asyncio.all_tasks()
    try:
        return await impl.fan_out(items, calls, limit=limit, **deadline)
    finally:
        calls.running_at_end = calls.running
        calls.tasks_at_end = asyncio.all_tasks() - before


async def outcome(impl: Implementation, calls: Calls, items: Sequence[int], *, limit: int, **deadline: float) -> Any:
    """What ``fan`` returned, or the exception it raised. A fan-out still going after ``PATIENCE``
    turns of the loop (or, with a deadline, a second) has its blocking calls released, so that
    one that waits for them ends too."""
    task = asyncio.ensure_future(fan(impl, calls, items, limit=limit, **deadline))
    if "deadline_s" in deadline:
        await asyncio.wait({task}, timeout=1.0)
    else:
        await turns_until(task.done)
    calls.release()
    try:
        return await task
    except Exception as error:
        return error


async def _capped(scenario: Coroutine[Any, Any, T], cap_s: float) -> T:
    budget = asyncio.timeout(cap_s)
    try:
        async with budget:
            return await scenario
    except TimeoutError:
        if budget.expired():
            raise AssertionError(f"the case did not end within {cap_s} s: a call never ended") from None
        raise


def run(scenario: Coroutine[Any, Any, T], cap_s: float = CAP_S) -> T:
    """``scenario`` in an event loop of its own, failed if it runs past ``cap_s``."""
    return asyncio.run(_capped(scenario, cap_s))


def probe(scenario: Callable[[Implementation], Coroutine[Any, Any, bool]]) -> Callable[[Implementation], bool]:
    """A mistake's probe: ``scenario`` run once per implementation, in a second at most."""

    @functools.cache
    def shows(impl: Implementation) -> bool:
        return run(scenario(impl), cap_s=1.0)

    return shows


async def _leaks_on_cancel(impl: Implementation) -> bool:
    calls = Calls(blocking=True)
    task = asyncio.ensure_future(fan(impl, calls, range(6), limit=3))
    await turns_until(lambda: calls.running == 3)
    task.cancel()
    await asyncio.wait({task})
    await turns_until(lambda: calls.running == 0, turns=10)
    return calls.running > 0


async def _returns_before_cancelled_calls_end(impl: Implementation) -> bool:
    calls = Calls(blocking=True, failing=0, slots=3)
    await outcome(impl, calls, range(6), limit=3)
    return calls.running_at_end > 0 or bool(calls.tasks_at_end)


async def _exceeds_the_limit(impl: Implementation) -> bool:
    calls = Calls(default_yields=2)
    await fan(impl, calls, range(6), limit=2)
    return calls.peak > 2


async def _a_task_per_item(impl: Implementation) -> bool:
    calls = Calls()
    before = len(asyncio.all_tasks())
    await fan(impl, calls, range(300), limit=2)
    return calls.peak_tasks - before > 2 * TASKS_PER_CALL + SPARE_TASKS


async def _completion_order(impl: Implementation) -> bool:
    calls = Calls(yields={0: 3, 1: 2, 2: 0})
    return bool(await fan(impl, calls, range(3), limit=3) != [answer(i) for i in range(3)])


async def _after_a_failure(impl: Implementation) -> tuple[set[int], set[int]]:
    """The calls that started after the failure, and those of them that ran to the end, the
    other calls blocking until cancelled (or released, for a fan-out that waits for them)."""
    calls = Calls(blocking=True, failing=0, slots=2)
    await outcome(impl, calls, range(8), limit=2)
    started = set(calls.started_after_failure)
    return started, started & set(calls.returned_after_failure)


async def _waits_after_a_failure(impl: Implementation) -> bool:
    _, ran = await _after_a_failure(impl)
    return bool(ran)


async def _starts_after_a_failure(impl: Implementation) -> bool:
    started, ran = await _after_a_failure(impl)
    return bool(started) and not ran


async def _raises_a_group(impl: Implementation) -> bool:
    calls = Calls(blocking=True, failing=1, slots=3)
    return isinstance(await outcome(impl, calls, range(6), limit=3), BaseExceptionGroup)


async def _one_at_a_time(impl: Implementation) -> bool:
    calls = Calls(default_yields=3)
    await fan(impl, calls, range(4), limit=4)
    return calls.peak == 1


async def _batches(impl: Implementation) -> bool:
    calls = Calls(slow=0, count=6)
    await fan(impl, calls, range(6), limit=2)
    return calls.peak == 2 and calls.returned[-1:] != [0]


async def _deadline_per_call(impl: Implementation) -> bool:
    calls = Calls(sleeps_s=0.02)
    ended = await outcome(impl, calls, range(8), limit=2, deadline_s=0.05)
    return calls.peak <= 2 and not isinstance(ended, TimeoutError)


MISTAKES = [
    Mistake(
        "leaks_tasks_when_cancelled",
        "when the fan-out itself is cancelled (its caller gave up), its calls must be cancelled too: cancel"
        " and await them in a `finally` (or run them in an asyncio.TaskGroup), not only when a call fails",
        (FAN_OUT,),
        probe(_leaks_on_cancel),
    ),
    Mistake(
        "leaves_cancelled_calls_running",
        "task.cancel() only asks: await the cancelled tasks (asyncio.gather(..., return_exceptions=True)) before"
        " raising, or they are still running, and may still write, after fan_out has returned",
        (FAN_OUT,),
        probe(_returns_before_cancelled_calls_end),
    ),
    Mistake(
        "exceeds_the_limit",
        "more than `limit` calls run at once: a task (or a gather) per item starts them all; keep `limit`"
        " workers that take the next item when their call ends, or a semaphore held across each call",
        (FAN_OUT,),
        probe(_exceeds_the_limit),
    ),
    Mistake(
        "a_task_per_item",
        "10,000 items make 10,000 tasks at once, even with a semaphore keeping `limit` of them in a call:"
        " start `limit` workers that take items from a shared iterator, so the tasks are bounded by the limit",
        (FAN_OUT,),
        probe(_a_task_per_item),
    ),
    Mistake(
        "results_in_completion_order",
        "results come in the order the calls ended: store each by its item's index and return them in the items' order",
        (FAN_OUT,),
        probe(_completion_order),
    ),
    Mistake(
        "waits_for_every_call_after_a_failure",
        "after the first failure the other calls ran on and the items not started still started: cancel the"
        " calls in flight, start no new one, and raise once they have ended",
        (FAN_OUT,),
        probe(_waits_after_a_failure),
    ),
    Mistake(
        "starts_calls_after_a_failure",
        "a call started after another had failed (and was then cancelled): a semaphore released by the failed"
        " call lets the next waiter in before the cancellation reaches it; check for a failure before each call",
        (FAN_OUT,),
        probe(_starts_after_a_failure),
    ),
    Mistake(
        "raises_an_exception_group",
        "the caller gets an ExceptionGroup rather than the call's exception: catch the TaskGroup's group and"
        " raise the first failure itself (`except*` or `except BaseExceptionGroup`), the others cancelled",
        (FAN_OUT,),
        probe(_raises_a_group),
    ),
    Mistake(
        "runs_one_at_a_time",
        "the calls ran one at a time: `limit` is how many to keep in flight at once, and 10,000 calls in"
        " sequence take 10,000 round trips",
        (FAN_OUT,),
        probe(_one_at_a_time),
    ),
    Mistake(
        "runs_in_batches",
        "batches of `limit` wait for their slowest call while the other slots sit idle: start the next item"
        " as soon as any call ends (workers on a shared iterator, or a semaphore per call)",
        (FAN_OUT,),
        probe(_batches),
    ),
    Mistake(
        "deadline_per_call",
        "the deadline is over the whole fan-out, not each call: one asyncio.timeout around everything, so"
        " that 10,000 calls under the per-call time still end by the deadline",
        (FAN_OUT,),
        probe(_deadline_per_call),
    ),
]


@st.composite
def shapes(draw: st.DrawFn) -> tuple[list[int], int]:
    """How many times each item's call yields (0 to 4; the items are their indexes), and a limit."""
    return draw(st.lists(st.integers(0, 4), max_size=30)), draw(st.integers(1, 8))


@needs(FAN_OUT)
@given(shapes())
def test_results_come_in_the_items_order(shape: tuple[list[int], int]) -> None:
    """The results are in the items' order, however the calls interleave and end."""
    yields, limit = shape
    items = list(range(len(yields)))

    async def scenario() -> None:
        calls = Calls(yields=dict(enumerate(yields)))
        assert await fan(impl, calls, items, limit=limit) == [answer(i) for i in items]
        assert calls.tasks_at_end == set()

    run(scenario())


@needs(FAN_OUT)
@given(shapes())
def test_never_more_than_the_limit_in_flight(shape: tuple[list[int], int]) -> None:
    """At most ``limit`` calls are in flight at any moment, and each item is called once."""
    yields, limit = shape
    items = list(range(len(yields)))

    async def scenario() -> None:
        calls = Calls(yields=dict(enumerate(yields)))
        await fan(impl, calls, items, limit=limit)
        assert calls.peak <= limit, f"{calls.peak} calls in flight at once with a limit of {limit}"
        assert sorted(calls.started) == items

    run(scenario())


@needs(FAN_OUT)
@given(st.integers(1, 40), st.integers(1, 10))
def test_the_limit_is_used(count: int, limit: int) -> None:
    """The limit is used: calls that each take a while fill every slot (``limit``, or every item when fewer)."""

    async def scenario() -> None:
        calls = Calls(default_yields=2 * limit + 4)
        await fan(impl, calls, range(count), limit=limit)
        assert calls.peak == min(limit, count), f"{count} items with a limit of {limit}"

    run(scenario())


@needs(FAN_OUT)
def test_a_slow_call_does_not_hold_back_the_others() -> None:
    """A slow call holds one slot: the other items go through the other slots meanwhile.

    Ten items, a limit of 2: the call for item 0 ends only once the nine others have returned."""

    async def scenario() -> None:
        calls = Calls(slow=0, count=10)
        assert await fan(impl, calls, range(10), limit=2) == [answer(i) for i in range(10)]
        assert calls.returned[-1] == 0, f"returned in the order {calls.returned}"

    run(scenario())


@needs(FAN_OUT)
def test_ten_thousand_items_keep_a_bounded_number_of_tasks() -> None:
    """10,000 items with a limit of 64: in order, 64 in flight, and tasks bounded by the limit, not the items.

    At most two tasks per call in flight and two more are alive at once, counted from inside the
    calls; none is left when fan_out returns."""

    async def scenario() -> None:
        calls = Calls()
        before = len(asyncio.all_tasks())
        items = list(range(10_000))
        assert await fan(impl, calls, items, limit=64) == [answer(i) for i in items]
        assert calls.peak == 64
        assert calls.peak_tasks - before <= TASKS_PER_CALL * 64 + SPARE_TASKS, (
            f"{calls.peak_tasks - before} tasks alive at once"
        )
        assert calls.tasks_at_end == set()

    run(scenario())


@st.composite
def failures(draw: st.DrawFn) -> tuple[int, int, int]:
    """A number of items, a limit, and the item (among the first ``limit``) whose call fails."""
    count, limit = draw(st.integers(1, 50)), draw(st.integers(1, 8))
    return count, limit, draw(st.integers(0, min(count, limit) - 1))


@needs(FAN_OUT)
@given(failures(), st.integers(0, 3))
def test_the_first_failure_is_raised_and_cancels_the_rest(failure: tuple[int, int, int], yields: int) -> None:
    """The first failure is raised as it is, once the other calls in flight are cancelled and ended.

    The other calls block until cancelled; the failing one fails once every slot is taken. No
    call starts after it failed, and nothing is left running when fan_out raises."""
    count, limit, failing = failure

    async def scenario() -> None:
        calls = Calls(blocking=True, failing=failing, slots=min(count, limit), yields={failing: yields})
        raised = await outcome(impl, calls, range(count), limit=limit)
        assert calls.failures != [], f"the call for item {failing} never ran"
        assert raised is calls.failures[0], f"fan_out raised {raised!r}, not the call's {calls.failures[0]!r}"
        assert calls.started_after_failure == [], "calls started after the failure"
        assert sorted(calls.cancelled) == sorted(set(calls.started) - {failing}), "the calls not cancelled"
        assert calls.running_at_end == 0, "calls still running when fan_out raised"
        assert calls.tasks_at_end == set()

    run(scenario())


@needs(FAN_OUT)
def test_the_deadline_raises_timeout_and_cancels_every_call() -> None:
    """A deadline that passes raises TimeoutError, once every call in flight is cancelled and ended.

    100 items whose calls block, a limit of 10, a deadline of 0.05 s."""

    async def scenario() -> None:
        calls = Calls(blocking=True)
        raised = await outcome(impl, calls, range(100), limit=10, deadline_s=0.05)
        assert isinstance(raised, TimeoutError), f"fan_out ended with {raised!r}"
        assert sorted(calls.cancelled) == sorted(calls.started), "the calls not cancelled"
        assert calls.running_at_end == 0, "calls still running when fan_out raised"
        assert calls.tasks_at_end == set()

    run(scenario())


@needs(FAN_OUT)
def test_the_deadline_is_over_the_whole_fan_out() -> None:
    """The deadline is over the whole fan-out: 20 calls of 0.02 s, two at a time, pass a deadline of 0.05 s."""

    async def scenario() -> None:
        calls = Calls(sleeps_s=0.02)
        raised = await outcome(impl, calls, range(20), limit=2, deadline_s=0.05)
        assert isinstance(raised, TimeoutError), f"fan_out ended with {raised!r}"

    run(scenario())


@needs(FAN_OUT)
def test_a_deadline_that_does_not_pass_changes_nothing() -> None:
    """With a deadline that does not pass, the results come back as without one."""

    async def scenario() -> None:
        calls = Calls()
        assert await fan(impl, calls, range(50), limit=4, deadline_s=30.0) == [answer(i) for i in range(50)]
        assert calls.tasks_at_end == set()

    run(scenario())


@needs(FAN_OUT)
def test_cancelling_the_fan_out_cancels_its_calls() -> None:
    """Cancelling the fan-out cancels every call in flight and starts no other; nothing outlives it.

    50 items whose calls block, a limit of 5: cancelled once five are in flight."""

    async def scenario() -> None:
        calls = Calls(blocking=True)
        task = asyncio.ensure_future(fan(impl, calls, range(50), limit=5))
        await turns_until(lambda: calls.running == 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(calls.started) == 5, f"started {calls.started}"
        assert sorted(calls.cancelled) == sorted(calls.started), "the calls not cancelled"
        assert calls.running_at_end == 0, "calls still running when the fan-out ended"
        assert calls.tasks_at_end == set()

    run(scenario())


@needs(FAN_OUT)
def test_no_items_and_a_bad_limit() -> None:
    """No items answer no results; a limit below 1 raises ValueError and calls nothing."""

    async def scenario() -> None:
        calls = Calls()
        assert await fan(impl, calls, [], limit=3) == []
        for items, limit in (([1, 2], 0), ([1], -1), ([], 0)):
            with pytest.raises(ValueError):  # noqa: PT011  (the candidate words the message)
                await fan(impl, calls, items, limit=limit)
        assert calls.started == []

    run(scenario())

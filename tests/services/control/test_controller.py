"""Controller: retries with backoff, requeues, resync, the worker bound, Fatal and cancellation."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Iterable

import pytest
import structlog

from services.control.backoff import Backoff
from services.control.controller import AlreadyRunning, Controller, Fatal, Outcome
from services.control.queue import WorkQueue
from tests.conftest import until

TICK_S = time.get_clock_info("monotonic").resolution


def _others() -> set[asyncio.Task[object]]:
    return asyncio.all_tasks() - {asyncio.current_task()}


async def _stop(controller: Controller[str], running: asyncio.Task[None]) -> None:
    controller.shut_down()
    await running


async def test_a_failing_reconcile_is_retried_with_growing_delays_until_it_succeeds() -> None:
    queue: WorkQueue[str] = WorkQueue(Backoff(base_s=0.002, cap_s=1000.0))
    loop = asyncio.get_running_loop()
    attempts: list[tuple[float, int]] = []

    async def reconcile(key: str) -> Outcome:
        attempts.append((loop.time(), queue.failures(key)))
        if len(attempts) <= 3:
            raise ConnectionError("agent unreachable")
        return Outcome()

    controller = Controller("test", reconcile, queue=queue)
    with structlog.testing.capture_logs() as logs:
        running = asyncio.create_task(controller.run())
        queue.add("node-1")
        await until(lambda: len(attempts) == 4)
        await _stop(controller, running)
    assert [failures for _, failures in attempts] == [0, 1, 2, 3]
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(attempts)]
    for failures, gap in enumerate(gaps):
        assert gap >= 0.002 * 2**failures - TICK_S
    assert queue.failures("node-1") == 0  # success forgot the failures
    failed = [entry for entry in logs if entry["event"] == "reconcile_failed"]
    assert [(entry["key"], entry["error"], entry["failures"]) for entry in failed] == [
        ("node-1", "ConnectionError", 1),
        ("node-1", "ConnectionError", 2),
        ("node-1", "ConnectionError", 3),
    ]


async def test_an_outcome_can_ask_for_another_pass() -> None:
    passes: Counter[str] = Counter()

    async def reconcile(key: str) -> Outcome:
        passes[key] += 1
        return Outcome(requeue_after_s=0.001) if passes[key] < 3 else Outcome()

    controller = Controller("test", reconcile)
    running = asyncio.create_task(controller.run())
    controller.queue.add("a")
    await until(lambda: passes["a"] == 3)
    assert controller.queue.due("a") is None
    assert len(controller.queue) == 0
    await _stop(controller, running)


async def test_workers_never_exceed_the_bound_and_a_key_never_runs_twice_at_once() -> None:
    active: set[str] = set()
    peak = 0
    passes: Counter[str] = Counter()
    keys = [f"node-{index}" for index in range(20)]
    controller: Controller[str]

    async def reconcile(key: str) -> Outcome:
        nonlocal peak
        assert key not in active, f"{key} reconciled twice at once"
        active.add(key)
        peak = max(peak, len(active))
        passes[key] += 1
        if passes[key] == 1:
            controller.queue.add(key)  # changed while reconciled: one more pass, later
        for _ in range(3):
            await asyncio.sleep(0)
        active.discard(key)
        return Outcome()

    controller = Controller("test", reconcile, workers=3)
    for key in keys:
        controller.queue.add(key)
    running = asyncio.create_task(controller.run())
    await until(lambda: sum(passes.values()) == 2 * len(keys) and not active)
    await _stop(controller, running)
    assert peak == 3
    assert passes == Counter({key: 2 for key in keys})


async def test_resync_adds_every_listed_key_periodically_and_survives_a_failed_listing() -> None:
    passes: Counter[str] = Counter()
    listings = 0

    async def list_keys() -> Iterable[str]:
        nonlocal listings
        listings += 1
        if listings == 2:
            raise OSError("database away")
        return ["a", "b"]

    async def reconcile(key: str) -> Outcome:
        passes[key] += 1
        return Outcome()

    controller = Controller("test", reconcile, list_keys=list_keys, resync_s=0.005)
    with structlog.testing.capture_logs() as logs:
        running = asyncio.create_task(controller.run())
        await until(lambda: passes["a"] >= 2 and passes["b"] >= 2)
        await _stop(controller, running)
    assert listings >= 3
    assert {"event": "resync_failed", "controller": "test", "error": "OSError", "log_level": "warning"} in logs


async def test_a_fatal_reconcile_cancels_the_pool_and_ends_run() -> None:
    before = _others()
    blocked: set[str] = set()
    cancelled: set[str] = set()
    release_fatal = asyncio.Event()

    async def reconcile(key: str) -> Outcome:
        if key == "bad":
            await release_fatal.wait()
            raise Fatal("store schema is newer than this code")
        blocked.add(key)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.add(key)
            raise
        return Outcome()

    async def list_keys() -> Iterable[str]:
        return ["bad", "a", "b"]

    controller = Controller("test", reconcile, workers=3, list_keys=list_keys, resync_s=60)
    running = asyncio.create_task(controller.run())
    await until(lambda: blocked == {"a", "b"})
    release_fatal.set()
    with pytest.raises(Fatal, match="schema"):
        await running
    assert cancelled == {"a", "b"}
    assert _others() == before
    # The interrupted keys wait for the next run.
    assert len(controller.queue) == 3


async def test_cancelling_run_leaves_no_task_and_run_can_start_again() -> None:
    before = _others()
    started: Counter[str] = Counter()
    finish = asyncio.Event()

    async def reconcile(key: str) -> Outcome:
        started[key] += 1
        await finish.wait()
        return Outcome()

    async def list_keys() -> Iterable[str]:
        return ["a", "b"]

    controller = Controller("test", reconcile, workers=2, list_keys=list_keys, resync_s=60)
    running = asyncio.create_task(controller.run())
    await until(lambda: started == Counter({"a": 1, "b": 1}))
    with pytest.raises(AlreadyRunning):
        await controller.run()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert _others() == before
    assert len(controller.queue) == 2  # interrupted: still owed a reconcile

    # A manager restarting the loop: the interrupted keys are reconciled (the resync at the
    # start of the run may add them once more).
    finish.set()
    running = asyncio.create_task(controller.run())
    await until(lambda: min(started["a"], started["b"]) >= 2 and len(controller.queue) == 0)
    await _stop(controller, running)
    assert _others() == before


def test_a_controller_refuses_no_workers_or_a_non_positive_resync() -> None:
    async def reconcile(key: str) -> Outcome:
        return Outcome()

    with pytest.raises(ValueError, match="workers"):
        Controller("test", reconcile, workers=0)
    with pytest.raises(ValueError, match="resync_s"):
        Controller("test", reconcile, resync_s=0)

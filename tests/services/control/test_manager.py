"""The loop manager: crashed loops come back after a growing backoff, one crash touches no
other loop, and stop ends every loop and pending restart, here and in a real control plane."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from services.control.backoff import Backoff
from services.control.manager import (
    RESTART_BACKOFF,
    LoopExists,
    LoopState,
    Manager,
    ManagerStopped,
    consecutive_crashes,
)
from tests.conftest import running_control_plane, until

# Tiny, and growing by a factor large enough that scheduling jitter on a loaded machine cannot
# make a later gap look shorter than an earlier one.
FAST = Backoff(base_s=0.02, cap_s=10.0)


class Boom(RuntimeError):
    """What the crashing loops raise."""


def other_tasks() -> set[asyncio.Task[object]]:
    return {task for task in asyncio.all_tasks() if task is not asyncio.current_task()}


async def test_a_crashing_loop_is_restarted_after_growing_delays() -> None:
    clock = asyncio.get_running_loop().time
    starts: list[float] = []

    async def crashes() -> None:
        starts.append(clock())
        raise Boom(f"run {len(starts)}")

    manager = Manager(FAST)
    manager.add("crasher", crashes)
    with capture_logs() as logs:
        manager.start()
        try:
            await until(lambda: len(starts) >= 4)
        finally:
            await manager.stop()

    gaps = [later - earlier for earlier, later in pairwise(starts)]
    assert all(shorter < longer for shorter, longer in pairwise(gaps)), gaps
    crashed = [entry for entry in logs if entry["event"] == "loop_crashed"]
    assert crashed[0]["loop"] == "crasher"
    assert crashed[0]["error_type"] == "Boom"
    assert crashed[0]["error"] == "run 1"
    assert isinstance(crashed[0]["exc_info"], Boom)
    assert [entry["consecutive_crashes"] for entry in crashed[:3]] == [1, 2, 3]
    status = manager.status()["crasher"]
    assert status.restarts >= 3
    assert status.last_error is not None
    assert status.last_error.startswith("Boom: run")


async def test_a_crash_leaves_the_other_loops_running() -> None:
    crashes = 0
    poke, poked = asyncio.Event(), asyncio.Event()
    steady_runs = 0

    async def crasher() -> None:
        nonlocal crashes
        crashes += 1
        raise Boom("again")

    async def steady() -> None:
        nonlocal steady_runs
        steady_runs += 1
        while True:
            await poke.wait()
            poke.clear()
            poked.set()

    manager = Manager(FAST)
    manager.add("steady", steady)
    manager.start()
    manager.add("crasher", crasher)  # added after start: runs at once
    try:
        await until(lambda: crashes >= 3)
        assert manager.status()["steady"].state is LoopState.RUNNING
        # Still alive, not merely marked so: it answers.
        poke.set()
        await until(poked.is_set)
        assert steady_runs == 1
        assert manager.status()["steady"].restarts == 0
        assert manager.status()["crasher"].restarts >= 2
    finally:
        await manager.stop()


async def test_stop_cancels_loops_and_pending_restarts_leaving_no_task() -> None:
    before = other_tasks()
    crashed = asyncio.Event()

    async def forever() -> None:
        await asyncio.Event().wait()

    async def crash_once() -> None:
        crashed.set()
        raise Boom("then wait an hour")

    manager = Manager(Backoff(base_s=3600.0, cap_s=3600.0))
    manager.add("forever", forever)
    manager.add("crasher", crash_once)
    assert {s.state for s in manager.status().values()} == {LoopState.PENDING}
    manager.start()
    await until(lambda: manager.status()["crasher"].state is LoopState.RESTARTING)
    assert manager.status()["forever"].state is LoopState.RUNNING
    assert other_tasks() - before  # the loops are tasks while they run

    await manager.stop()
    assert other_tasks() == before
    assert {s.state for s in manager.status().values()} == {LoopState.STOPPED}
    await manager.stop()  # a second stop is harmless
    assert other_tasks() == before
    with pytest.raises(ManagerStopped):
        manager.add("late", forever)
    with pytest.raises(ManagerStopped):
        manager.start()


async def test_a_loop_that_returns_is_not_restarted() -> None:
    runs = 0

    async def once() -> None:
        nonlocal runs
        runs += 1

    manager = Manager(FAST)
    manager.add("once", once)
    with capture_logs() as logs:
        manager.start()
        await until(lambda: manager.status()["once"].state is LoopState.STOPPED)
    await manager.stop()
    assert runs == 1
    assert manager.status()["once"].restarts == 0
    assert [entry["event"] for entry in logs] == ["loop_returned"]


async def test_a_cancellation_the_loop_raised_itself_is_a_crash() -> None:
    runs = 0

    async def cancels_itself() -> None:
        nonlocal runs
        runs += 1
        raise asyncio.CancelledError  # e.g. a timeout handled wrongly inside the loop

    manager = Manager(FAST)
    manager.add("confused", cancels_itself)
    manager.start()
    try:
        await until(lambda: runs >= 2)
        assert manager.status()["confused"].last_error == "CancelledError: "
    finally:
        await manager.stop()


async def test_a_name_is_owned_once() -> None:
    async def nothing() -> None:
        return None

    manager = Manager(FAST)
    manager.add("loop", nothing)
    with pytest.raises(LoopExists):
        manager.add("loop", nothing)


def test_a_crashed_loop_waits_1_s_doubling_to_a_minute() -> None:
    assert [RESTART_BACKOFF.delay_s(n) for n in range(8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert RESTART_BACKOFF.delay_s(10_000) == 60.0


def test_a_run_longer_than_the_cap_starts_a_new_series_of_crashes() -> None:
    assert consecutive_crashes(5, ran_seconds=0.1, cap_s=60.0) == 6
    assert consecutive_crashes(5, ran_seconds=60.0, cap_s=60.0) == 6
    assert consecutive_crashes(5, ran_seconds=61.0, cap_s=60.0) == 1


async def test_stopping_a_control_plane_leaves_no_task(tmp_path: Path, database_url: str) -> None:
    before = other_tasks()
    async with running_control_plane(tmp_path / "data", database_url) as running:
        loops = running.plane.loops.status()
        assert list(loops) == [
            "releaser",
            "idempotency-janitor",
            "operation-watch",
            "metrics-maintenance",
            "revocations",
            "heartbeat-flush",
            "directives",
            "node-reconciler",
        ]
        assert {s.state for s in loops.values()} == {LoopState.RUNNING}
        async with running.client() as operator:
            await operator.create_tenant("acme")
    assert {s.state for s in running.plane.loops.status().values()} == {LoopState.STOPPED}
    assert other_tasks() == before

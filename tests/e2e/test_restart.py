"""A graceful restart under load, as a rolling upgrade makes one: the callers of a retrying
client see no error, and everything acknowledged before, during and after it is in the store."""

from __future__ import annotations

import asyncio
from pathlib import Path

from clients import AsyncClient
from tests.conftest import free_port, register_ready_nodes, start_control_plane

NODES = 24
CALLERS = 16
# Pairs acknowledged before the stop, and again after the restart, before the load ends.
PAIRS_EACH_SIDE = 20


async def test_a_restart_under_load_fails_no_caller_and_loses_nothing(tmp_path: Path, database_url: str) -> None:
    """Calls that reach the server as it begins to stop are dropped unrun (CANCELLED) or refused
    (UNAVAILABLE); the client retries both until the server on the same address answers."""
    data_dir, address = tmp_path / "data", f"127.0.0.1:{free_port()}"
    first = await start_control_plane(data_dir, database_url, listen=address, scrub_seconds=0)
    try:
        async with first.client() as operator:
            await register_ready_nodes(operator, NODES)
            token = (await operator.create_tenant("acme")).token
    except BaseException:
        await first.plane.stop()
        raise

    created: list[str] = []
    cancelled: list[str] = []
    load_over = asyncio.Event()
    progress = asyncio.Condition()

    async def caller() -> None:
        async with AsyncClient(address, token, timeout=30) as tenant:
            while not load_over.is_set():
                allocation = await tenant.create_allocation(gpu_model="H100", node_count=1)
                created.append(allocation.allocation_id)
                operation = await tenant.cancel_allocation(allocation.allocation_id)
                cancelled.append(allocation.allocation_id)
                # Its node is READY again before this caller asks for the next: a caller holds at
                # most one node, so the fleet (NODES >= CALLERS) is never full.
                await tenant.wait_operation(operation.name, timeout=30)
                async with progress:
                    progress.notify_all()

    async def until(pairs: int) -> None:
        async with asyncio.timeout(30), progress:
            await progress.wait_for(lambda: len(cancelled) >= pairs)

    callers = [asyncio.create_task(caller()) for _ in range(CALLERS)]
    running = [first]
    try:
        await until(PAIRS_EACH_SIDE)
        await running.pop().plane.stop()
        before = len(cancelled)
        second = await start_control_plane(
            data_dir, database_url, listen=address, scrub_seconds=0, operator_token=first.operator_token
        )
        running.append(second)
        await until(before + PAIRS_EACH_SIDE)
        load_over.set()
        # A caller's error fails the test here.
        await asyncio.gather(*callers)
        async with second.client() as operator:
            states = {i: (await operator.get_allocation(i)).state for i in created}
    finally:
        load_over.set()
        for task in callers:
            task.cancel()
        await asyncio.gather(*callers, return_exceptions=True)
        for plane in running:
            await plane.plane.stop()

    assert before >= PAIRS_EACH_SIDE
    assert len(cancelled) >= before + PAIRS_EACH_SIDE
    assert len(set(created)) == len(created)
    # Every acknowledged create is there, and every acknowledged cancel took.
    assert set(states) == set(created)
    assert {states[i] for i in cancelled} <= {"CANCELLING", "CANCELLED"}

"""``gpucloud allocations`` with a fleet too small for a create: the create says it waits PENDING
and where, ``allocations explain`` says why with the figures, ``--fail-if-unavailable`` refuses,
and ``--wait`` waits for the admission (exit 3 when its time is up, the allocation still queued)."""

from __future__ import annotations

import asyncio
import re

from clients import AsyncClient
from tests.clients.cli.test_commands import connect, document
from tests.clients.cli.test_connection import gpucloud
from tests.conftest import RunningControlPlane, register_ready_nodes, until

CREATE = ["allocations", "create", "--gpu-model", "H100", "--tenant", "acme"]


async def _one_free_of_two(operator: AsyncClient) -> str:
    """Two READY H100 nodes, one held by an allocation of tenant acme: its id."""
    await register_ready_nodes(operator, 2)
    await operator.create_tenant("acme")
    return (await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")).allocation_id


def _flat(output: str) -> str:
    """The output without the tables' column borders, every run of spaces and line breaks as one
    space: a table's cells fold."""
    return " ".join(output.replace("│", " ").split())


async def test_a_create_too_big_for_the_free_nodes_queues_and_explain_says_why(
    control_plane: RunningControlPlane,
) -> None:
    async with control_plane.client() as operator:
        await _one_free_of_two(operator)
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *CREATE, "--nodes", "2")
    assert code == 0, output
    assert "Queued" in output
    hint = re.search(
        r"PENDING at position 1 in the H100 queue, holding nothing until it is admitted whole;"
        r" see why with: gpucloud allocations explain (alloc-\S+)",
        output,
    )
    assert hint is not None, output
    allocation_id = hint[1]

    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "allocations", "explain", allocation_id)
    assert code == 0, output
    flat = _flat(output)
    assert f"{allocation_id}: PENDING, position 1 in the H100 queue, priority 0, 2 node(s) asked whole" in flat
    assert "1 WAITING_FOR_CAPACITY" in flat
    assert "waiting for capacity: 1 free H100 node(s), 2 needed whole; short by 1" in flat

    explain = ["allocations", "explain", allocation_id, "--json"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *explain)
    assert code == 0, output
    explained = document(output)
    assert (explained["allocation"]["state"], explained["allocation"]["queue_position"]) == ("PENDING", 1)
    assert [reason["kind"] for reason in explained["reasons"]] == ["WAITING_FOR_CAPACITY"]
    assert explained["reasons"][0]["figures"] == {"free": 1, "spares": 0, "needed": 2}


async def test_fail_if_unavailable_refuses_with_the_capacity_and_queues_nothing(
    control_plane: RunningControlPlane,
) -> None:
    async with control_plane.client() as operator:
        await _one_free_of_two(operator)
    create = [*CREATE, "--nodes", "2", "--fail-if-unavailable"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *create)
    assert code == 1, output
    assert "error RESOURCE_EXHAUSTED INSUFFICIENT_CAPACITY" in output
    assert "waiting for capacity: 1 free H100 node(s), 2 needed whole; short by 1" in _flat(output)
    assert "retry safely" not in output
    async with control_plane.client() as operator:
        assert len(await operator.list_allocations(tenant_id="acme")) == 1


async def test_a_create_placed_at_once_prints_no_queue_and_explain_says_it_is_not_pending(
    control_plane: RunningControlPlane,
) -> None:
    async with control_plane.client() as operator:
        await _one_free_of_two(operator)
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *CREATE, "--json")
    assert code == 0, output
    created = document(output)
    assert (created["state"], created["queue_position"], created["priority"]) == ("ACTIVE", 0, 0)
    assert created["admit_time"] >= created["create_time"]
    assert "PENDING" not in output
    explain = ["allocations", "explain", created["allocation_id"]]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *explain)
    assert code == 0, output
    assert f"{created['allocation_id']} is not pending: it is ACTIVE, admitted" in output


async def test_wait_returns_once_the_scheduler_admits_it(control_plane: RunningControlPlane) -> None:
    """The create waits while its two nodes are not free; a cancel frees one, and the command
    prints the allocation ACTIVE on them and exits 0."""
    async with control_plane.client() as operator:
        active = await _one_free_of_two(operator)
        create = [*CREATE, "--nodes", "2", "--priority", "10", "--wait", "--timeout", "60", "--json"]
        waiting = asyncio.create_task(asyncio.to_thread(gpucloud, *connect(control_plane), *create))

        async def queued() -> bool:
            return len(await operator.list_allocations(state="PENDING")) == 1

        await until(queued)
        await operator.cancel_allocation(active)
        code, output = await asyncio.wait_for(waiting, timeout=60)
    assert code == 0, output
    assert re.search(r"alloc-\S+ is PENDING at position 1 in the H100 queue; waiting for its admission", output)
    admitted = document(output)
    assert (admitted["state"], admitted["priority"], admitted["replayed"]) == ("ACTIVE", 10, False)
    assert sorted(admitted["node_ids"]) == ["node-000", "node-001"]
    assert admitted["admit_time"] > admitted["create_time"]


async def test_a_wait_ended_by_a_cancel_exits_1_saying_so(control_plane: RunningControlPlane) -> None:
    async with control_plane.client() as operator:
        await _one_free_of_two(operator)
        create = [*CREATE, "--nodes", "2", "--wait", "--timeout", "60"]
        waiting = asyncio.create_task(asyncio.to_thread(gpucloud, *connect(control_plane), *create))

        async def queued() -> bool:
            return len(await operator.list_allocations(state="PENDING")) == 1

        await until(queued)
        [pending] = await operator.list_allocations(state="PENDING")
        await operator.cancel_allocation(pending.allocation_id)
        code, output = await asyncio.wait_for(waiting, timeout=60)
    assert code == 1, output
    assert f"{pending.allocation_id} was cancelled while it waited; nothing was allocated" in output


async def test_a_wait_that_runs_out_exits_3_leaving_the_allocation_queued(control_plane: RunningControlPlane) -> None:
    async with control_plane.client() as operator:
        await _one_free_of_two(operator)
    create = [*CREATE, "--nodes", "2", "--wait", "--timeout", "0"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *create)
    assert code == 3, output
    still = re.search(
        r"still PENDING at position 1 in the H100 queue after 0 s; it stays queued \(cancel it with:"
        r" gpucloud allocations cancel (alloc-\S+)\); see why with: gpucloud allocations explain (alloc-\S+)",
        output,
    )
    assert still is not None, output
    assert still[1] == still[2]
    async with control_plane.client() as operator:
        assert (await operator.get_allocation(still[1])).state == "PENDING"


async def test_the_listing_shows_each_pending_allocations_place_and_cancel_ends_it_at_once(
    control_plane: RunningControlPlane,
) -> None:
    async with control_plane.client() as operator:
        await _one_free_of_two(operator)
        low = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
        high = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme", priority=500)
    listing = ["allocations", "list", "--state", "PENDING", "--json"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *listing)
    assert code == 0, output
    places = {item["allocation_id"]: item["queue_position"] for item in document(output)["items"]}
    assert places == {high.allocation_id: 1, low.allocation_id: 2}

    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "allocations", "list")
    assert code == 0, output
    [row] = [line.split() for line in output.splitlines() if high.allocation_id in line]
    assert [cell for cell in row if cell in ("500", "PENDING", "1")] == ["500", "PENDING", "1"]
    assert "why an allocation waits: gpucloud allocations explain ALLOCATION_ID" in output

    cancel = ["allocations", "cancel", high.allocation_id, "--json"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *cancel)
    assert code == 0, output
    operation = document(output)
    assert (operation["done"], operation["state"]) == (True, "CANCELLED")


async def test_a_priority_out_of_range_is_a_usage_error_naming_the_option(control_plane: RunningControlPlane) -> None:
    async with control_plane.client() as operator:
        await operator.create_tenant("acme")
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *CREATE, "--priority", "1001")
    assert code == 2, output
    assert "--priority: must be 0-1000; got 1001" in output

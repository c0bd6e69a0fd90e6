"""What the client says of a create that cannot be placed now: it answers PENDING holding
nothing (or refuses, when asked to), ``explain_allocation`` says why it waits, and
``wait_admitted`` returns once the scheduler has admitted it, or when its time is up."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from clients import AsyncClient, Client, InvalidArgumentError, InvalidValueError, ResourceExhaustedError
from tests.clients.scripted_server import Start
from tests.conftest import RunningControlPlane, register_ready_nodes, until

GET_ALLOCATION = "gpucloud.v1.AllocationService/GetAllocation"


async def _one_free_of_two(operator: AsyncClient) -> str:
    """Two READY H100 nodes, one held by an allocation of tenant acme: its id."""
    await register_ready_nodes(operator, 2)
    await operator.create_tenant("acme")
    return (await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")).allocation_id


async def test_a_create_that_cannot_be_placed_waits_pending_holding_nothing(operator: AsyncClient) -> None:
    await _one_free_of_two(operator)
    waiting = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme", priority=7)
    assert (waiting.state, waiting.node_ids, waiting.admit_time) == ("PENDING", (), None)
    assert waiting.priority == 7
    read = await operator.get_allocation(waiting.allocation_id)
    assert read.queue_position == 1
    assert [n.node_id for n in await operator.list_nodes(state="READY")] == ["node-001"]


async def test_fail_if_unavailable_refuses_and_records_nothing(operator: AsyncClient) -> None:
    await _one_free_of_two(operator)
    with pytest.raises(ResourceExhaustedError) as caught:
        await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme", fail_if_unavailable=True)
    assert caught.value.reason == "INSUFFICIENT_CAPACITY"
    assert caught.value.metadata["free"] == "1"
    assert len(await operator.list_allocations(tenant_id="acme")) == 1


async def test_a_priority_out_of_range_is_refused_naming_it(operator: AsyncClient) -> None:
    await operator.create_tenant("acme")
    with pytest.raises(InvalidArgumentError) as caught:
        await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme", priority=1001)
    assert set(caught.value.field_violations) == {"priority"}


async def test_explain_says_why_it_waits_with_the_figures(operator: AsyncClient) -> None:
    active = await _one_free_of_two(operator)
    waiting = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    explained = await operator.explain_allocation(waiting.allocation_id)
    assert explained.allocation.allocation_id == waiting.allocation_id
    assert explained.allocation.queue_position == 1
    assert [reason.kind for reason in explained.reasons] == ["WAITING_FOR_CAPACITY"]
    assert explained.reasons[0].figures == {"free": 1, "spares": 0, "needed": 2}
    assert "short by 1" in explained.reasons[0].message
    assert (await operator.explain_allocation(active)).reasons == ()


async def test_wait_admitted_returns_the_allocation_once_the_scheduler_admits_it(operator: AsyncClient) -> None:
    active = await _one_free_of_two(operator)
    waiting = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    waited = asyncio.create_task(operator.wait_admitted(waiting.allocation_id, timeout=30, poll_s=0.05))
    await operator.cancel_allocation(active)
    admitted = await waited
    assert admitted.state == "ACTIVE"
    assert sorted(admitted.node_ids) == ["node-000", "node-001"]
    assert admitted.admit_time is not None
    assert admitted.create_time is not None
    assert admitted.admit_time > admitted.create_time
    assert admitted.queue_position == 0


async def test_wait_admitted_returns_the_last_read_when_its_time_is_up(operator: AsyncClient) -> None:
    await _one_free_of_two(operator)
    waiting = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    still = await operator.wait_admitted(waiting.allocation_id, timeout=0)
    assert (still.state, still.queue_position) == ("PENDING", 1)


async def test_a_pending_allocation_cancelled_is_done_at_once_and_wait_admitted_says_so(
    operator: AsyncClient,
) -> None:
    await _one_free_of_two(operator)
    waiting = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    operation = await operator.cancel_allocation(waiting.allocation_id)
    assert operation.done
    assert (await operator.wait_admitted(waiting.allocation_id, timeout=5)).state == "CANCELLED"
    assert (await operator.explain_allocation(waiting.allocation_id)).reasons == ()


@pytest.mark.parametrize("poll_s", [0, -1, float("nan"), float("inf"), True])
async def test_a_poll_interval_that_is_not_a_positive_number_is_refused_before_calling(
    scripted: Start, poll_s: Any
) -> None:
    seen: list[bytes] = []

    async def answer(request: bytes, context: object) -> bytes:
        seen.append(request)
        return b""

    async with AsyncClient(await scripted({GET_ALLOCATION: answer}), "token") as client:
        with pytest.raises(InvalidValueError) as caught:
            await client.wait_admitted("alloc-1", poll_s=poll_s)
    assert caught.value.field == "poll_s"
    assert seen == []


async def test_the_blocking_client_explains_and_waits_too(control_plane: RunningControlPlane) -> None:
    async with control_plane.client() as operator:
        active = await _one_free_of_two(operator)
        waiting = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")

    def blocking() -> tuple[str, str]:
        with Client(control_plane.address, control_plane.operator_token, timeout=15) as client:
            kind = client.explain_allocation(waiting.allocation_id).reasons[0].kind
            client.cancel_allocation(active)
            return kind, client.wait_admitted(waiting.allocation_id, timeout=30, poll_s=0.05).state

    assert await asyncio.to_thread(blocking) == ("WAITING_FOR_CAPACITY", "ACTIVE")


async def test_the_queue_admits_the_higher_priority_first(operator: AsyncClient) -> None:
    """Two wait for the one node a cancel frees: the later one, of higher priority, gets it."""
    await register_ready_nodes(operator, 1)
    await operator.create_tenant("acme")
    active = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    first = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    urgent = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme", priority=900)
    positions = {a.allocation_id: a.queue_position for a in await operator.list_allocations(state="PENDING")}
    assert positions == {urgent.allocation_id: 1, first.allocation_id: 2}
    await operator.cancel_allocation(active.allocation_id)

    async def urgent_admitted() -> bool:
        return (await operator.get_allocation(urgent.allocation_id)).state == "ACTIVE"

    await until(urgent_admitted)
    assert (await operator.get_allocation(first.allocation_id)).queue_position == 1

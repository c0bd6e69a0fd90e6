"""CancelAllocation as a long-running operation: accepted at once, done when nodes are released."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from accounting.model import datetime_to_us, us_to_seconds
from accounting.periods import period_of
from clients import Allocation, AsyncClient, NotFoundError, ResourceExhaustedError
from clients.metrics import NodeSamples
from tests.conftest import RunningControlPlane, register_ready_nodes, running_control_plane, start_control_plane


@pytest.fixture
async def slow_scrub_plane(tmp_path: Path, database_url: str) -> AsyncIterator[RunningControlPlane]:
    """A control plane whose nodes take half a second to scrub, so a cancel is observably pending."""
    async with running_control_plane(tmp_path / "d", database_url, scrub_seconds=0.5) as running:
        yield running


@pytest.fixture
async def slow_operator(slow_scrub_plane: RunningControlPlane) -> AsyncIterator[AsyncClient]:
    async with slow_scrub_plane.client() as client:
        yield client


async def allocate_for_tenant(plane: RunningControlPlane, operator: AsyncClient, nodes: int) -> Allocation:
    """Register ``nodes`` READY nodes, create tenant acme and allocate all of them for it."""
    await register_ready_nodes(operator, nodes)
    await operator.create_tenant("acme")
    return await operator.create_allocation(gpu_model="H100", node_count=nodes, tenant_id="acme")


async def test_cancel_is_accepted_then_completes(
    slow_scrub_plane: RunningControlPlane, slow_operator: AsyncClient
) -> None:
    """Cancel returns a pending CANCELLING Operation that completes with the allocation CANCELLED and nodes READY."""
    allocation = await allocate_for_tenant(slow_scrub_plane, slow_operator, 2)

    operation = await slow_operator.cancel_allocation(allocation.allocation_id)
    assert operation.done is False
    assert operation.state == "CANCELLING"
    assert operation.allocation_id == allocation.allocation_id
    assert operation.name.startswith("operations/")
    assert operation.allocation is None

    polled = await slow_operator.get_operation(operation.name)
    assert (polled.name, polled.done, polled.state) == (operation.name, False, "CANCELLING")
    assert (await slow_operator.get_allocation(allocation.allocation_id)).state == "CANCELLING"
    # Until the scrub is done the nodes are wiped, neither held by the tenant nor allocatable.
    for node_id in allocation.node_ids:
        assert (await slow_operator.get_node(node_id)).state == "SCRUBBING"

    finished = await slow_operator.wait_operation(operation.name, timeout=15)
    assert finished.done is True
    assert finished.error_code is None
    assert finished.state == "CANCELLED"
    assert finished.nodes_total == finished.nodes_released == 2
    assert finished.allocation is not None
    assert finished.allocation.state == "CANCELLED"
    assert finished.allocation.release_time is not None

    released = await slow_operator.get_allocation(allocation.allocation_id)
    assert released.state == "CANCELLED"
    assert released.release_time is not None
    assert released.cancel_time is not None
    assert released.cancel_time <= released.release_time
    for node_id in allocation.node_ids:
        node = await slow_operator.get_node(node_id)
        assert (node.state, node.allocation_id) == ("READY", None)


async def test_cancel_twice_returns_the_same_operation(
    slow_scrub_plane: RunningControlPlane, slow_operator: AsyncClient
) -> None:
    """Cancelling again, before or after completion, returns the same Operation and changes nothing more."""
    allocation = await allocate_for_tenant(slow_scrub_plane, slow_operator, 2)

    first = await slow_operator.cancel_allocation(allocation.allocation_id)
    second = await slow_operator.cancel_allocation(allocation.allocation_id)
    assert second.name == first.name
    assert second.done is False

    finished = await slow_operator.wait_operation(first.name, timeout=15)
    assert finished.done is True
    released = await slow_operator.get_allocation(allocation.allocation_id)

    third = await slow_operator.cancel_allocation(allocation.allocation_id)
    assert third.name == first.name
    assert third.done is True
    assert third.state == "CANCELLED"
    again = await slow_operator.get_allocation(allocation.allocation_id)
    assert (again.state, again.release_time) == ("CANCELLED", released.release_time)
    assert [o.name for o in await slow_operator.list_operations()] == [first.name]
    for node_id in allocation.node_ids:
        assert (await slow_operator.get_node(node_id)).state == "READY"


async def test_concurrent_cancels_share_one_operation(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Concurrent cancels of one allocation all get the same Operation, and only one is recorded."""
    allocation = await allocate_for_tenant(control_plane, operator, 2)
    accepted = await asyncio.gather(*(operator.cancel_allocation(allocation.allocation_id) for _ in range(8)))
    assert len({o.name for o in accepted}) == 1
    assert (await operator.wait_operation(accepted[0].name, timeout=15)).done
    assert [o.name for o in await operator.list_operations()] == [accepted[0].name]


async def test_pending_cancel_completes_after_restart(tmp_path: Path, database_url: str) -> None:
    """A cancel accepted just before the control plane stops completes after it restarts."""
    data_dir = tmp_path / "restart"
    running = await start_control_plane(data_dir, database_url, scrub_seconds=0.5)
    try:
        async with running.client() as operator:
            allocation = await allocate_for_tenant(running, operator, 2)
            accepted = await operator.cancel_allocation(allocation.allocation_id)
            assert accepted.done is False
    finally:
        await running.plane.stop()

    restarted = await start_control_plane(data_dir, database_url, scrub_seconds=0.5)
    try:
        async with restarted.client() as operator:
            finished = await operator.wait_operation(accepted.name, timeout=15)
            nodes = [await operator.get_node(n) for n in allocation.node_ids]
    finally:
        await restarted.plane.stop()

    assert finished.done is True
    assert finished.allocation is not None
    assert finished.allocation.state == "CANCELLED"
    assert [(n.state, n.allocation_id) for n in nodes] == [("READY", None)] * 2


async def test_cancel_unknown_allocation_is_not_found(operator: AsyncClient) -> None:
    """Cancelling an allocation id that does not exist is NOT_FOUND and creates no operation."""
    with pytest.raises(NotFoundError):
        await operator.cancel_allocation("alloc-does-not-exist")
    assert len(await operator.list_operations()) == 0


async def test_an_unknown_operation_is_named_as_the_api_names_it(operator: AsyncClient) -> None:
    """NOT_FOUND for GetOperation names the operation by its full name, message and metadata alike."""
    name = "operations/op-01a2000000000000000000000000"
    with pytest.raises(NotFoundError) as caught:
        await operator.get_operation(name)
    assert caught.value.reason == "OPERATION_NOT_FOUND"
    assert caught.value.metadata == {"name": name, "field": "name"}
    assert repr(name) in caught.value.message


async def test_list_operations_shows_the_cancel(control_plane: RunningControlPlane, operator: AsyncClient) -> None:
    """list_operations shows the cancel Operation, for the operator and for the owning tenant."""
    await register_ready_nodes(operator, 1)
    token = (await operator.create_tenant("acme")).token
    async with control_plane.client(token) as tenant:
        allocation = await tenant.create_allocation(gpu_model="H100", node_count=1)
        operation = await tenant.cancel_allocation(allocation.allocation_id)
        await tenant.wait_operation(operation.name, timeout=15)
        tenant_view = await tenant.list_operations()

    operator_view = await operator.list_operations()
    assert [(o.name, o.allocation_id, o.done) for o in operator_view] == [
        (operation.name, allocation.allocation_id, True)
    ]
    assert [o.name for o in tenant_view] == [operation.name]


async def test_released_nodes_can_be_allocated_again(control_plane: RunningControlPlane, operator: AsyncClient) -> None:
    """Once a cancel completes, its nodes can be placed in a new allocation."""
    allocation = await allocate_for_tenant(control_plane, operator, 2)
    with pytest.raises(ResourceExhaustedError):
        await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme", fail_if_unavailable=True)

    operation = await operator.cancel_allocation(allocation.allocation_id)
    assert (await operator.wait_operation(operation.name, timeout=15)).done

    again = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    assert again.allocation_id != allocation.allocation_id
    assert sorted(again.node_ids) == sorted(allocation.node_ids)
    assert again.state == "ACTIVE"
    for node_id in again.node_ids:
        node = await operator.get_node(node_id)
        assert (node.state, node.allocation_id) == ("ALLOCATED", again.allocation_id)


def _ms(moment: datetime | None) -> int:
    assert moment is not None
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def _just_after(moment: datetime | None) -> int:
    """The first millisecond after ``moment`` (a sample time; the server takes samples up to a
    few minutes ahead of its clock, so nothing need wait for it)."""
    return _ms(moment) + 1


async def test_the_tenant_stops_paying_and_seeing_the_node_when_its_cancel_is_accepted(
    tmp_path: Path, database_url: str
) -> None:
    """While the nodes scrub (the provider's time), the tenant is billed only up to the cancel's
    acceptance, its usage log already has the stops, and it reads no sample written since."""
    async with (
        running_control_plane(tmp_path / "d", database_url, scrub_seconds=30) as plane,
        plane.client() as operator,
    ):
        await register_ready_nodes(operator, 1)
        token = (await operator.create_tenant("acme")).token
        async with plane.client(token) as tenant:
            allocation = await tenant.create_allocation(gpu_model="H100", node_count=1)
            node_id = allocation.node_ids[0]
            held_at = _just_after(allocation.admit_time)
            await operator.write_samples([NodeSamples(node_id, held_at, {0: {"power_w": 1.0}})])
            accepted = await tenant.cancel_allocation(allocation.allocation_id)
            cancelled = await tenant.get_allocation(allocation.allocation_id)
            scrubbing_at = _just_after(cancelled.cancel_time)
            await operator.write_samples([NodeSamples(node_id, scrubbing_at, {0: {"power_w": 2.0}})])
            assert not (await tenant.get_operation(accepted.name)).done
            assert (await operator.get_node(node_id)).state == "SCRUBBING"

            seen = await tenant.query_metrics(start=held_at - 1000, end=scrubbing_at + 1000, node_ids=[node_id])
            stops = [e async for e in tenant.iter_usage_events() if e.kind == "STOP"]
            assert allocation.admit_time is not None
            assert cancelled.cancel_time is not None
            periods = sorted({period_of(datetime_to_us(t)) for t in (allocation.admit_time, cancelled.cancel_time)})
            invoices = [await tenant.get_invoice(p.name) for p in periods]

    assert held_at < _ms(cancelled.cancel_time)  # written inside the hold
    assert [s.timestamps_ms.tolist() for s in seen.series] == [[held_at]]
    assert len(stops) == 8
    assert {e.event_time for e in stops} == {cancelled.cancel_time}
    held = datetime_to_us(cancelled.cancel_time) - datetime_to_us(allocation.admit_time)
    billed = sum((line.gpu_seconds for invoice in invoices for line in invoice.lines), Decimal(0))
    assert billed == us_to_seconds(held) * 8
    assert [a for invoice in invoices for a in invoice.anomalies] == []

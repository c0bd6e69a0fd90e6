"""Usage events are written with the state changes that cause them (the outbox billing reads)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlmodel import col, select

from clients import Allocation
from services.store.engine import Database
from services.store.models import UsageEventRow
from tests.conftest import RunningControlPlane, gpu_uuids, register_ready_nodes, start_control_plane

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(moment: datetime | None) -> int:
    assert moment is not None
    return (moment - EPOCH) // timedelta(microseconds=1)


async def _events(database_url: str) -> list[UsageEventRow]:
    store = await Database.open(database_url)
    try:
        async with store.read() as session:
            return list((await session.exec(select(UsageEventRow).order_by(col(UsageEventRow.event_id)))).all())
    finally:
        await store.close()


def _expected(allocation: Allocation, kind: str) -> set[str]:
    return {f"{allocation.allocation_id}/{uuid}/{kind}" for node in allocation.node_ids for uuid in gpu_uuids(node)}


async def test_every_gpu_gets_one_start_at_placement_and_one_stop_at_the_cancel(
    control_plane: RunningControlPlane, database_url: str
) -> None:
    """A 2-node allocation records 16 starts at its create time and 16 stops at its cancel time,
    when the tenant lost the nodes (the scrub after it is the provider's time)."""
    async with control_plane.client() as operator:
        await register_ready_nodes(operator, 3)
        await operator.create_tenant("acme")
        allocation = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
        started = await _events(database_url)
        operation = await operator.cancel_allocation(allocation.allocation_id)
        done = await operator.wait_operation(operation.name, timeout=30)
    assert done.done
    assert done.allocation is not None
    assert {e.event_id for e in started} == _expected(allocation, "start")
    assert {e.at_us for e in started} == {_micros(allocation.admit_time)}
    events = await _events(database_url)
    stops = [e for e in events if e.kind == "stop"]
    assert {e.event_id for e in stops} == _expected(allocation, "stop")
    assert {e.at_us for e in stops} == {_micros(done.allocation.cancel_time)}
    assert _micros(done.allocation.cancel_time) < _micros(done.allocation.release_time)
    assert {(e.tenant_id, e.gpu_model, e.source) for e in events} == {("acme", "H100", "control-plane")}


async def test_a_cancel_interrupted_by_a_restart_stops_billing_exactly_once(tmp_path: Path, database_url: str) -> None:
    """A cancel's stops commit with the cancel, before any scrub: stopping the control plane
    mid-scrub leaves them, and the release after the restart writes no second one."""
    first = await start_control_plane(tmp_path / "data", database_url, scrub_seconds=30)
    async with first.client() as operator:
        await register_ready_nodes(operator, 1)
        await operator.create_tenant("acme")
        allocation = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
        operation = await operator.cancel_allocation(allocation.allocation_id)
        cancelled = await operator.get_allocation(allocation.allocation_id)
    await first.plane.stop()
    accepted = [e for e in await _events(database_url) if e.kind == "stop"]
    assert sorted(e.event_id for e in accepted) == sorted(_expected(allocation, "stop"))
    assert {e.at_us for e in accepted} == {_micros(cancelled.cancel_time)}

    second = await start_control_plane(tmp_path / "data", database_url, scrub_seconds=0)
    try:
        async with second.client() as operator:
            done = await operator.wait_operation(operation.name, timeout=30)
        assert done.done
    finally:
        await second.plane.stop()
    stops = [e for e in await _events(database_url) if e.kind == "stop"]
    assert sorted(e.event_id for e in stops) == sorted(_expected(allocation, "stop"))
    assert {e.at_us for e in stops} == {_micros(cancelled.cancel_time)}

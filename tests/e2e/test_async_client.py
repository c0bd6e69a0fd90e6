"""The asyncio client's own life cycle, against a real server."""

from __future__ import annotations

from clients import AsyncClient
from tests.conftest import RunningControlPlane, register_ready_nodes


async def test_a_closed_client_opens_a_new_channel_on_its_next_call(control_plane: RunningControlPlane) -> None:
    client = control_plane.client()
    try:
        [node_id] = await register_ready_nodes(client, 1)
        await client.close()
        await client.close()  # closing twice is harmless
        assert (await client.get_node(node_id)).state == "READY"
    finally:
        await client.close()


async def test_one_client_serves_calls_to_every_service(operator: AsyncClient) -> None:
    """The stubs are made once per channel for all services: each still reaches its own."""
    created = await operator.create_tenant("acme")
    [node_id] = await register_ready_nodes(operator, 1)
    assert (await operator.get_tenant("acme")).tenant_id == created.tenant.tenant_id
    assert (await operator.get_node(node_id)).node_id == node_id
    assert (await operator.list_allocations()).items == []
    assert (await operator.list_operations()).items == []
    assert (await operator.list_usage_events()).items == []


async def test_usage_events_iterate_across_pages_oldest_first(operator: AsyncClient) -> None:
    """``iter_usage_events`` fetches page after page: a 2-node hold's 32 events in pages of 5."""
    await register_ready_nodes(operator, 2)
    await operator.create_tenant("acme")
    allocation = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    cancel = await operator.cancel_allocation(allocation.allocation_id)
    assert (await operator.wait_operation(cancel.name, timeout=10)).done
    events = [event async for event in operator.iter_usage_events(tenant_id="acme", page_size=5)]
    assert len(events) == len({e.event_id for e in events}) == 2 * 8 * 2
    assert [(e.event_time, e.event_id) for e in events] == sorted((e.event_time, e.event_id) for e in events)
    assert [e.kind for e in events] == ["START"] * 16 + ["STOP"] * 16

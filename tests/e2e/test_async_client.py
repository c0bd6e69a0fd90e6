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

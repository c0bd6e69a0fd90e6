"""A pool's spares under concurrent creates: however many creates race, together they leave the
reserve free, on SQLite (one group placed as a set) and on PostgreSQL (the reserve's row lock)."""

from __future__ import annotations

import asyncio

from clients import AsyncClient, ResourceExhaustedError
from tests.conftest import RunningControlPlane, register_ready_nodes


async def test_concurrent_creates_together_leave_the_spares_free(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Ten nodes, three of them spares, twenty racing creates of two nodes each: exactly three
    creates fit (a fourth would leave two free), and four nodes stay free; every other create is refused, saying why."""
    await register_ready_nodes(operator, 10)
    await operator.create_tenant("acme")
    await operator.set_spare_pool("H100", 3)
    clients = [control_plane.client() for _ in range(5)]
    try:
        results = await asyncio.gather(
            *(
                clients[i % len(clients)].create_allocation(
                    gpu_model="H100", node_count=2, tenant_id="acme", fail_if_unavailable=True
                )
                for i in range(20)
            ),
            return_exceptions=True,
        )
    finally:
        for client in clients:
            await client.close()

    created = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, ResourceExhaustedError)]
    assert (len(created), len(refused)) == (3, 17), results
    assert all("held back as spares" in str(error) for error in refused)
    taken = [node for allocation in created for node in allocation.node_ids]
    assert len(set(taken)) == 6
    [pool] = [p for p in await operator.list_spare_pools() if p.gpu_model == "H100"]
    assert (pool.spares, pool.free_nodes) == (3, 4)

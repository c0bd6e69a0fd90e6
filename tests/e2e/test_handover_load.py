"""Nodes handed from tenant to tenant under load keep their records in order.

Sixteen tenants create and cancel on 48 nodes that take half a second to scrub, so capacity runs
out and comes back all the time, while groups of callers retry one ``request_id`` until it
does. Afterwards, read from the database: every node went to its next allocation at or after
its previous one released it, every node's events are in time order, and on every GPU no two
allocations' usage intervals (what billing charges, and what a tenant may read metrics for)
overlap.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path

from clients import AsyncClient, ResourceExhaustedError
from services.store.engine import Database
from tests.conftest import RunningControlPlane, register_ready_nodes, running_control_plane
from tests.services.store.handover_checks import handovers_before_release, node_events_out_of_order, usage_overlaps

NODES = 48
CHURNERS = 16
SHARED_CALLERS = 8
RUN_SECONDS = 3.0


async def tenant_client(plane: RunningControlPlane, operator: AsyncClient, tenant_id: str) -> AsyncClient:
    """A client of its own (a channel, a token of its own) for an existing tenant."""
    return plane.client((await operator.create_tenant_token(tenant_id)).token)


async def test_handovers_under_load_never_overlap(tmp_path: Path, database_url: str) -> None:
    outcomes: Counter[str] = Counter()
    async with running_control_plane(tmp_path / "data", database_url, scrub_seconds=0.5) as plane:
        async with plane.client() as operator:
            await register_ready_nodes(operator, NODES)
            tenants = [f"churn-{n}" for n in range(CHURNERS)]
            for tenant_id in [*tenants, "shared"]:
                await operator.create_tenant(tenant_id)
            churners = [await tenant_client(plane, operator, tenant_id) for tenant_id in tenants]
            sharers = [await tenant_client(plane, operator, "shared") for _ in range(SHARED_CALLERS)]
        loop = asyncio.get_running_loop()
        stop = loop.time() + RUN_SECONDS
        rng = random.Random(23)

        async def churn(client: AsyncClient) -> None:
            while loop.time() < stop:
                try:
                    allocation = await client.create_allocation(
                        gpu_model="H100", node_count=rng.randint(1, 3), fail_if_unavailable=True
                    )
                except ResourceExhaustedError:
                    outcomes["refused"] += 1
                    await asyncio.sleep(0.01)
                    continue
                outcomes["placed"] += 1
                await asyncio.sleep(rng.uniform(0, 0.03))
                await client.cancel_allocation(allocation.allocation_id)

        async def share(client: AsyncClient, round_number: int) -> str:
            """Retry one key until capacity lets it through; the allocation everyone gets."""
            while True:
                try:
                    created = await client.create_allocation(
                        gpu_model="H100", node_count=2, request_id=f"shared-{round_number}", fail_if_unavailable=True
                    )
                except ResourceExhaustedError:
                    await asyncio.sleep(0.005)
                    continue
                outcomes["replayed" if created.replayed else "shared"] += 1
                return created.allocation_id

        async def sharing() -> None:
            round_number = 0
            while loop.time() < stop:
                round_number += 1
                got = await asyncio.gather(*(share(client, round_number) for client in sharers))
                assert len(set(got)) == 1, got
                await sharers[0].cancel_allocation(got[0])

        try:
            await asyncio.gather(*(churn(client) for client in churners), sharing())
        finally:
            for client in churners + sharers:
                await client.close()

    assert outcomes["placed"] > 0, outcomes
    assert outcomes["refused"] > 0, outcomes
    assert outcomes["shared"] > 0, outcomes
    assert outcomes["replayed"] > 0, outcomes
    store = await Database.open(database_url)
    try:
        assert await handovers_before_release(store) == []
        assert await node_events_out_of_order(store) == []
        assert await usage_overlaps(store) == []
    finally:
        await store.close()

"""Two control planes on one PostgreSQL database, as replicas behind a load balancer would run
(docs/architecture.md, "Past one machine": several replicas on one PostgreSQL must not corrupt state).

Each replica has its own releaser and its own in-process wake-ups; they share only the
database. A caller may reach either replica for any call: create on one, cancel on the other,
wait for the operation anywhere, page a listing across both.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import pytest

from clients import AsyncClient
from clients.billing import UsageEvent
from tests.conftest import backend, register_ready_nodes, running_control_plane

pytestmark = pytest.mark.skipif(
    backend() != "postgresql",
    reason="replicas share a PostgreSQL database (runs in .ci/run's PostgreSQL pass); a second server on "
    "one SQLite data directory is refused",
)

WORKERS_PER_REPLICA = 3
ROUNDS = 6


async def _usage_events(operator: AsyncClient) -> list[UsageEvent]:
    return [event async for event in operator.iter_usage_events(page_size=100)]


def _moment(event: UsageEvent) -> datetime:
    assert event.event_time is not None
    return event.event_time


async def test_replicas_share_one_fleet_without_granting_a_gpu_twice(tmp_path: Path, database_url: str) -> None:
    async with (
        running_control_plane(tmp_path / "a", database_url) as first,
        running_control_plane(tmp_path / "b", database_url, operator_token=first.operator_token) as second,
        first.client() as operator,
    ):
        await register_ready_nodes(operator, WORKERS_PER_REPLICA * 2 + 2)
        token = (await operator.create_tenant("acme")).token
        replicas = (first, second)

        async def worker(index: int) -> list[str]:
            """Create on one replica, cancel on the other, wait on the first: every round
            crosses replicas. Each worker holds at most one node, so capacity never runs out."""
            home, away = replicas[index % 2], replicas[(index + 1) % 2]
            made = []
            async with home.client(token) as here, away.client(token) as there:
                for _ in range(ROUNDS):
                    allocation = await here.create_allocation(gpu_model="H100", node_count=1)
                    operation = await there.cancel_allocation(allocation.allocation_id)
                    done = await here.wait_operation(operation.name, timeout=10)
                    assert done.done, done
                    assert done.error_code is None, done
                    made.append(allocation.allocation_id)
            return made

        made = [
            a for batch in await asyncio.gather(*(worker(i) for i in range(WORKERS_PER_REPLICA * 2))) for a in batch
        ]
        assert len(set(made)) == WORKERS_PER_REPLICA * 2 * ROUNDS

        # Every allocation is released, seen alike from both replicas, and a listing pages
        # across them: a page token made by one is taken by the other.
        async with first.client(token) as on_first, second.client(token) as on_second:
            seen: list[str] = []
            page = await on_first.list_allocations(page_size=7)
            pages = (on_second, on_first)
            turn = 0
            while True:
                seen += [a.allocation_id for a in page if a.state == "CANCELLED"]
                if not page.next_page_token:
                    break
                page = await pages[turn % 2].list_allocations(page_size=7, page_token=page.next_page_token)
                turn += 1
        assert sorted(seen) == sorted(made)
        assert turn >= 2  # the listing did cross replicas both ways

        # The billing outbox: one start and one stop per GPU per allocation, and on each GPU
        # the holds never overlap (a GPU granted by both replicas at once would).
        events = await _usage_events(operator)
        by_hold: dict[tuple[str, str], dict[str, datetime]] = defaultdict(dict)
        for event in events:
            kinds = by_hold[(event.gpu_uuid, event.allocation_id)]
            assert event.kind not in kinds, f"{event.kind} recorded twice for {event.allocation_id} on {event.gpu_uuid}"
            kinds[event.kind] = _moment(event)
        assert {allocation for _, allocation in by_hold} == set(made)
        assert len(by_hold) == len(made) * 8
        holds_by_gpu: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
        for (gpu, _), kinds in by_hold.items():
            assert set(kinds) == {"START", "STOP"}
            holds_by_gpu[gpu].append((kinds["START"], kinds["STOP"]))
        for gpu, holds in holds_by_gpu.items():
            holds.sort()
            for (_, ended), (started, _) in pairwise(holds):
                assert ended <= started, f"{gpu} was held twice at once"

        # And the fleet is whole again: every node READY, no allocation on it.
        nodes = (await operator.list_nodes(page_size=100)).items
        assert [(n.state, n.allocation_id) for n in nodes] == [("READY", None)] * len(nodes)


async def test_cancels_on_both_replicas_are_each_released_once_with_both_releasers_looking(
    tmp_path: Path, database_url: str
) -> None:
    """Cancels arrive on both replicas, so both releasers wake and look for the same CANCELLING
    allocations as they come due; each allocation is released by exactly one of them."""
    async with (
        running_control_plane(tmp_path / "a", database_url, scrub_seconds=0.3) as first,
        running_control_plane(
            tmp_path / "b", database_url, operator_token=first.operator_token, scrub_seconds=0.3
        ) as second,
        first.client() as operator,
        second.client() as operator_on_second,
    ):
        nodes = await register_ready_nodes(operator, 8)
        token = (await operator.create_tenant("acme")).token
        async with first.client(token) as tenant_first, second.client(token) as tenant_second:
            tenants = (tenant_first, tenant_second)
            allocations = [await tenant_first.create_allocation(gpu_model="H100", node_count=2) for _ in range(4)]
            operations = [await tenants[i % 2].cancel_allocation(a.allocation_id) for i, a in enumerate(allocations)]
            done = await asyncio.gather(
                *(tenants[i % 2].wait_operation(op.name, timeout=10) for i, op in enumerate(operations))
            )
        assert all(op.done and op.error_code is None for op in done)
        events = await _usage_events(operator)
        stops = [e for e in events if e.kind == "STOP"]
        assert len(stops) == len({e.event_id for e in stops}) == 4 * 2 * 8
        for i, node_id in enumerate(nodes):
            history = (await (operator, operator_on_second)[i % 2].list_node_events(node_id)).items
            assert [e.event for e in history if e.event.startswith("FINISH_SCRUB")] == ["FINISH_SCRUB"], node_id

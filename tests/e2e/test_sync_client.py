"""The blocking Client against a real server: the same API, called from a plain thread."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

import pytest

from clients import Allocation, AsyncClient, Client, NotFoundError, Operation
from tests.conftest import RunningControlPlane, register_ready_nodes


@dataclass
class RoundTrip:
    created: Allocation
    replayed: Allocation
    listed: list[Allocation]
    accepted: Operation
    finished: Operation
    after: Allocation
    operations: list[Operation]


def round_trip(address: str, token: str) -> RoundTrip:
    """Create, list, cancel and wait with the blocking client; runs outside the event loop."""
    with Client(address, token, timeout=15) as client:
        created = client.create_allocation(gpu_model="H100", node_count=2, request_id="sync-req-1")
        replayed = client.create_allocation(gpu_model="H100", node_count=2, request_id="sync-req-1")
        listed = list(itertools.islice(client.iter_allocations(page_size=1), 10))
        accepted = client.cancel_allocation(created.allocation_id)
        finished = client.wait_operation(accepted.name, timeout=15)
        after = client.get_allocation(created.allocation_id)
        operations = list(client.list_operations())
        with pytest.raises(NotFoundError):
            client.get_allocation("alloc-missing")
    return RoundTrip(created, replayed, listed, accepted, finished, after, operations)


async def test_blocking_client_round_trip(control_plane: RunningControlPlane, operator: AsyncClient) -> None:
    """The blocking Client creates, lists, cancels and waits for an allocation against the running server."""
    await register_ready_nodes(operator, 2)
    token = (await operator.create_tenant("acme")).token

    result = await asyncio.to_thread(round_trip, control_plane.address, token)

    assert result.created.tenant_id == "acme"
    assert result.created.state == "ACTIVE"
    assert len(result.created.node_ids) == 2
    assert result.replayed.allocation_id == result.created.allocation_id
    assert [a.allocation_id for a in result.listed] == [result.created.allocation_id]
    assert result.accepted.allocation_id == result.created.allocation_id
    assert result.finished.name == result.accepted.name
    assert result.finished.done is True
    assert result.after.state == "CANCELLED"
    assert result.after.release_time is not None
    assert [o.name for o in result.operations] == [result.accepted.name]
    for node_id in result.created.node_ids:
        node = await operator.get_node(node_id)
        assert (node.state, node.allocation_id) == ("READY", None)


def first_then_stop(address: str, token: str) -> tuple[Allocation, list[Allocation]]:
    """Take one allocation of a three-page listing and stop; then list them all again."""
    with Client(address, token, timeout=15) as client:
        listing = client.iter_allocations(page_size=1)
        first = next(listing)
        listing.close()  # stopped early: the listing is closed on the client's loop
        return first, list(client.iter_allocations(page_size=1))


async def test_a_listing_stopped_early_is_closed_and_the_client_goes_on(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Stopping a blocking listing after its first item leaves the client usable, and a new
    listing walks every page."""
    await register_ready_nodes(operator, 3)
    token = (await operator.create_tenant("acme")).token
    async with AsyncClient(control_plane.address, token) as tenant:
        made = [(await tenant.create_allocation(gpu_model="H100", node_count=1)).allocation_id for _ in range(3)]

    first, everything = await asyncio.to_thread(first_then_stop, control_plane.address, token)

    assert first.allocation_id == made[-1]  # newest first
    assert [a.allocation_id for a in everything] == made[::-1]

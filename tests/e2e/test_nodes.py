"""Node lifecycle end to end: a real control plane on loopback, driven through the typed client."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypedDict

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from clients import AsyncClient
from clients.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from clients.models import Node, NodeEvent
from tests.conftest import RunningControlPlane, gpu_uuids, register_ready_nodes

TENANT = "acme"


async def _register(client: AsyncClient, node_id: str, **overrides: Any) -> Node:
    fields: dict[str, Any] = {
        "gpu_model": "H100",
        "gpu_uuids": gpu_uuids(node_id),
        "zone": "zone-a",
        "rack": "rack-0",
        "leaf_switch": "leaf-0",
    }
    fields.update(overrides)
    return await client.register_node(node_id, **fields)


async def _allocate_one(client: AsyncClient) -> str:
    allocation = await client.create_allocation(gpu_model="H100", node_count=1, tenant_id=TENANT)
    assert allocation.state == "ACTIVE"
    assert len(allocation.node_ids) == 1
    return allocation.allocation_id


async def _cancel_and_wait(client: AsyncClient, allocation_id: str) -> None:
    operation = await client.cancel_allocation(allocation_id)
    finished = await client.wait_operation(operation.name, timeout=20)
    assert finished.done, finished
    assert finished.state == "CANCELLED"


def _moves(events: Iterable[NodeEvent]) -> list[tuple[str, str, str]]:
    return [(e.event, e.from_state, e.to_state) for e in events]


# Registration --------------------------------------------------------------------------------


async def test_register_starts_burn_in(operator: AsyncClient) -> None:
    """A new node is registered with its inventory and put into BURN_IN at once."""
    node = await _register(operator, "node-a", rack="rack-7", leaf_switch="leaf-3", gpu_model="B200")
    assert node.state == "BURN_IN"
    assert node.gpu_model == "B200"
    assert (node.zone, node.rack, node.leaf_switch) == ("zone-a", "rack-7", "leaf-3")
    assert [(g.uuid, g.index) for g in node.gpus] == [(u, i) for i, u in enumerate(gpu_uuids("node-a"))]
    assert not node.cordoned
    assert node.allocation_id is None
    assert await operator.get_node("node-a") == node


async def test_register_again_with_same_inventory_is_a_no_op(operator: AsyncClient) -> None:
    """Re-registering with identical inventory returns the node unchanged and records no new event."""
    first = await _register(operator, "node-a")
    events = await operator.list_node_events("node-a")
    again = await _register(operator, "node-a")
    assert again == first
    assert await operator.list_node_events("node-a") == events
    # Even after it moved on, the same inventory is still just a no-op, not a reset.
    await operator.complete_burn_in("node-a")
    assert (await _register(operator, "node-a")).state == "READY"


@pytest.mark.parametrize(
    ("change", "differs"),
    [
        ({"zone": "zone-b"}, ["zone"]),
        ({"rack": "rack-9"}, ["rack"]),
        ({"leaf_switch": "leaf-9"}, ["leaf_switch"]),
        ({"gpu_model": "A100"}, ["gpu_model"]),
        ({"gpu_uuids": [*gpu_uuids("node-a")[:7], "GPU-replacement-07"]}, ["gpus"]),
        ({"gpu_uuids": list(reversed(gpu_uuids("node-a")))}, ["gpus"]),
        ({"rack": "rack-9", "gpu_model": "A100"}, ["gpu_model", "rack"]),
    ],
    ids=["zone", "rack", "leaf", "model", "uuid", "order", "model-and-rack"],
)
async def test_register_with_other_inventory_already_exists(
    operator: AsyncClient, change: dict[str, object], differs: list[str]
) -> None:
    """Registering a known node id with a different inventory is ALREADY_EXISTS naming the
    fields that differ (the first as ``field``), and changes nothing."""
    before = await _register(operator, "node-a")
    events = await operator.list_node_events("node-a")
    with pytest.raises(AlreadyExistsError) as caught:
        await _register(operator, "node-a", **change)
    assert caught.value.reason == "NODE_INVENTORY_MISMATCH"
    assert caught.value.metadata["field"] == differs[0]
    assert caught.value.metadata["differs"] == ",".join(differs)
    assert all(name in str(caught.value) for name in differs)
    assert await operator.get_node("node-a") == before
    assert await operator.list_node_events("node-a") == events


async def test_concurrent_registrations_of_one_node_all_answer_as_a_repeat_would(operator: AsyncClient) -> None:
    """Eight registrations of one inventory at once (an agent retrying): one registers it, every
    other answers with the node as a repeat does, and the node has one history."""
    nodes = await asyncio.gather(*(_register(operator, "node-a") for _ in range(8)))
    assert len({(n.node_id, n.create_time) for n in nodes}) == 1
    events = await operator.list_node_events("node-a")
    assert [e.event for e in events] == ["REGISTER", "START_BURN_IN"]


async def test_gpu_owned_by_another_node_already_exists(operator: AsyncClient) -> None:
    """A GPU UUID that belongs to another node makes the registration ALREADY_EXISTS, creating nothing."""
    await _register(operator, "node-a")
    stolen = gpu_uuids("node-b")
    stolen[5] = gpu_uuids("node-a")[2]
    with pytest.raises(AlreadyExistsError) as caught:
        await _register(operator, "node-b", gpu_uuids=stolen)
    assert caught.value.reason == "GPU_ALREADY_REGISTERED"
    assert caught.value.metadata["node_id"] == "node-a"
    assert caught.value.metadata["field"] == "gpus[5].uuid"
    with pytest.raises(NotFoundError):
        await operator.get_node("node-b")


async def test_a_gpu_uuid_in_other_letter_case_is_the_same_gpu(operator: AsyncClient) -> None:
    """UUIDs are hex: ``GPU-ABCD...`` and ``GPU-abcd...`` are one GPU, stored in NVML's lower case,
    and one GPU is never registered on two nodes, nor twice on one."""
    lower = [f"GPU-fd6f44dd-0a1b-4c2d-8e3f-00000000000{i}" for i in range(8)]
    upper = ["GPU-" + uuid[4:].upper() for uuid in lower]
    node = await _register(operator, "node-a", gpu_uuids=upper)
    assert [g.uuid for g in node.gpus] == lower
    assert await _register(operator, "node-a", gpu_uuids=lower) == node  # the same inventory again
    taken = gpu_uuids("node-b")
    taken[3] = lower[3]
    with pytest.raises(AlreadyExistsError) as caught:
        await _register(operator, "node-b", gpu_uuids=taken)
    assert (caught.value.reason, caught.value.metadata["field"]) == ("GPU_ALREADY_REGISTERED", "gpus[3].uuid")
    twice = gpu_uuids("node-c")
    twice[1] = "GPU-" + twice[0][4:].upper()
    with pytest.raises(InvalidArgumentError) as refused:
        await _register(operator, "node-c", gpu_uuids=twice)
    assert list(refused.value.field_violations) == ["gpus[1].uuid"]
    assert [n.node_id for n in await operator.list_nodes()] == ["node-a"]


# Burn-in -------------------------------------------------------------------------------------


async def test_burn_in_pass_makes_ready(operator: AsyncClient) -> None:
    """A passed burn-in moves the node from BURN_IN to READY."""
    await _register(operator, "node-a")
    node = await operator.complete_burn_in("node-a", passed=True, detail="dcgmi diag -r 3 passed")
    assert node.state == "READY"
    last = (await operator.list_node_events("node-a"))[-1]
    assert (last.event, last.from_state, last.to_state) == ("PASS_BURN_IN", "BURN_IN", "READY")
    assert last.reason == "dcgmi diag -r 3 passed"


async def test_burn_in_fail_quarantines(operator: AsyncClient) -> None:
    """A failed burn-in moves the node to QUARANTINED, where it cannot be allocated."""
    await _register(operator, "node-a")
    node = await operator.complete_burn_in("node-a", passed=False, detail="nvbandwidth 30% below median")
    assert node.state == "QUARANTINED"
    await operator.create_tenant(TENANT)
    with pytest.raises(ResourceExhaustedError):
        await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id=TENANT, fail_if_unavailable=True)
    last = (await operator.list_node_events("node-a"))[-1]
    assert (last.event, last.to_state, last.reason) == ("FAIL_BURN_IN", "QUARANTINED", "nvbandwidth 30% below median")


async def test_burn_in_result_on_ready_node_is_illegal(operator: AsyncClient) -> None:
    """Reporting a burn-in result for a node that is not in BURN_IN is an illegal transition."""
    [node_id] = await register_ready_nodes(operator, 1)
    with pytest.raises(FailedPreconditionError) as caught:
        await operator.complete_burn_in(node_id, passed=False)
    assert caught.value.reason == "ILLEGAL_NODE_TRANSITION"
    assert caught.value.metadata["field"] == "node_id"
    assert (await operator.get_node(node_id)).state == "READY"


# Cordon and drain ----------------------------------------------------------------------------


async def test_cordon_makes_ready_node_unplaceable_and_uncordon_restores_it(operator: AsyncClient) -> None:
    """A cordoned READY node stays READY but is never placed; uncordoning makes it placeable again."""
    [node_id] = await register_ready_nodes(operator, 1)
    await operator.create_tenant(TENANT)
    cordoned = await operator.cordon_node(node_id, reason="suspect NVLink")
    assert (cordoned.state, cordoned.cordoned, cordoned.status_reason) == ("READY", True, "suspect NVLink")
    with pytest.raises(ResourceExhaustedError) as caught:
        await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id=TENANT, fail_if_unavailable=True)
    assert caught.value.reason == "INSUFFICIENT_CAPACITY"
    assert len(await operator.list_allocations()) == 0
    assert (await operator.get_node(node_id)).state == "READY"

    uncordoned = await operator.uncordon_node(node_id)
    assert (uncordoned.state, uncordoned.cordoned, uncordoned.status_reason) == ("READY", False, "")
    allocation_id = await _allocate_one(operator)
    node = await operator.get_node(node_id)
    assert (node.state, node.allocation_id) == ("ALLOCATED", allocation_id)


async def test_cordon_and_uncordon_are_recorded_once_each(operator: AsyncClient) -> None:
    """A cordon, a new reason and an uncordon each add one event that keeps the state; repeating
    a cordon with the same reason, or uncordoning an uncordoned node, adds none."""
    [node_id] = await register_ready_nodes(operator, 1)
    before = len(await operator.list_node_events(node_id))
    await operator.uncordon_node(node_id)
    await operator.cordon_node(node_id, reason="suspect NVLink")
    await operator.cordon_node(node_id, reason="suspect NVLink")
    await operator.cordon_node(node_id, reason="NVLink replaced, soaking")
    await operator.uncordon_node(node_id)
    await operator.uncordon_node(node_id)

    added = (await operator.list_node_events(node_id))[before:]
    assert [(e.event, e.from_state, e.to_state, e.reason) for e in added] == [
        ("CORDON", "READY", "READY", "suspect NVLink"),
        ("CORDON", "READY", "READY", "NVLink replaced, soaking"),
        ("UNCORDON", "READY", "READY", "uncordoned"),
    ]
    assert all(e.actor.startswith("operator:") for e in added)


async def test_drain_of_free_node_quarantines_it(operator: AsyncClient) -> None:
    """Draining a READY node takes it out of service at once: QUARANTINED and cordoned."""
    [node_id] = await register_ready_nodes(operator, 1)
    node = await operator.drain_node(node_id, reason="XID 79: fell off the bus")
    assert (node.state, node.cordoned, node.status_reason) == ("QUARANTINED", True, "XID 79: fell off the bus")
    last = (await operator.list_node_events(node_id))[-1]
    assert (last.event, last.from_state, last.to_state) == ("DRAIN", "READY", "QUARANTINED")
    assert last.reason == "XID 79: fell off the bus"


async def test_drain_of_allocated_node_quarantines_after_release(operator: AsyncClient) -> None:
    """A drained ALLOCATED node stays with its tenant as DRAINING, and after the cancel completes is QUARANTINED."""
    [node_id] = await register_ready_nodes(operator, 1)
    await operator.create_tenant(TENANT)
    allocation_id = await _allocate_one(operator)
    draining = await operator.drain_node(node_id, reason="ECC row remap pending")
    assert (draining.state, draining.allocation_id, draining.cordoned) == ("DRAINING", allocation_id, True)
    assert (await operator.get_allocation(allocation_id)).state == "ACTIVE"

    await _cancel_and_wait(operator, allocation_id)
    node = await operator.get_node(node_id)
    assert node.state == "QUARANTINED"
    assert node.allocation_id is None
    assert _moves(await operator.list_node_events(node_id))[-4:] == [
        ("ALLOCATE", "READY", "ALLOCATED"),
        ("DRAIN", "ALLOCATED", "DRAINING"),
        ("RELEASE", "DRAINING", "SCRUBBING"),
        ("FINISH_SCRUB_DRAINED", "SCRUBBING", "QUARANTINED"),
    ]


async def test_a_draining_nodes_cordon_belongs_to_the_drain(operator: AsyncClient) -> None:
    """Uncordoning would make a node that still leaves service on release look placeable, and a
    new cordon reason would hide the drain's."""
    [node_id] = await register_ready_nodes(operator, 1)
    await operator.create_tenant(TENANT)
    allocation_id = await _allocate_one(operator)
    await operator.drain_node(node_id, reason="ECC row remap pending")
    with pytest.raises(FailedPreconditionError) as caught:
        await operator.uncordon_node(node_id)
    assert (caught.value.reason, caught.value.metadata["field"]) == ("DRAIN_PENDING", "node_id")
    with pytest.raises(FailedPreconditionError) as caught:
        await operator.cordon_node(node_id, reason="another reason")
    assert caught.value.reason == "DRAIN_PENDING"
    node = await operator.get_node(node_id)
    assert (node.state, node.cordoned, node.status_reason) == ("DRAINING", True, "ECC row remap pending")
    await _cancel_and_wait(operator, allocation_id)
    assert (await operator.get_node(node_id)).state == "QUARANTINED"


async def test_release_without_drain_returns_node_to_ready(operator: AsyncClient) -> None:
    """Without a drain, a cancelled allocation's node is scrubbed and READY again (the contrast case)."""
    [node_id] = await register_ready_nodes(operator, 1)
    await operator.create_tenant(TENANT)
    allocation_id = await _allocate_one(operator)
    await _cancel_and_wait(operator, allocation_id)
    node = await operator.get_node(node_id)
    assert (node.state, node.allocation_id, node.cordoned) == ("READY", None, False)
    assert _moves(await operator.list_node_events(node_id))[-2:] == [
        ("RELEASE", "ALLOCATED", "SCRUBBING"),
        ("FINISH_SCRUB", "SCRUBBING", "READY"),
    ]


# Repair and retirement -----------------------------------------------------------------------


async def test_repair_and_return_to_service_goes_through_burn_in(operator: AsyncClient) -> None:
    """QUARANTINED -> REPAIR -> BURN_IN (uncordoned) -> READY, and the node is placeable again."""
    [node_id] = await register_ready_nodes(operator, 1)
    await operator.drain_node(node_id, reason="thermal throttling")
    repairing = await operator.start_repair(node_id, reason="RMA ticket 1234")
    assert repairing.state == "REPAIR"
    back = await operator.return_to_service(node_id, reason="board replaced")
    assert (back.state, back.cordoned, back.status_reason) == ("BURN_IN", False, "")
    assert (await operator.complete_burn_in(node_id)).state == "READY"
    await operator.create_tenant(TENANT)
    await _allocate_one(operator)


async def test_return_to_service_from_quarantine(operator: AsyncClient) -> None:
    """A quarantined node can go straight back to burn-in without a repair."""
    await _register(operator, "node-a")
    await operator.complete_burn_in("node-a", passed=False)
    assert (await operator.return_to_service("node-a", reason="false alarm")).state == "BURN_IN"


@pytest.mark.parametrize("via_repair", [False, True], ids=["from-quarantine", "from-repair"])
async def test_retire_is_final(operator: AsyncClient, via_repair: bool) -> None:
    """A retired node is RETIRED, every further lifecycle call on it is an illegal transition, and its
    cordon no longer changes."""
    [node_id] = await register_ready_nodes(operator, 1)
    await operator.drain_node(node_id)
    if via_repair:
        await operator.start_repair(node_id)
    assert (await operator.retire_node(node_id, reason="end of life")).state == "RETIRED"
    events = await operator.list_node_events(node_id)
    for call in (
        operator.drain_node,
        operator.start_repair,
        operator.return_to_service,
        operator.retire_node,
    ):
        with pytest.raises(FailedPreconditionError) as caught:
            await call(node_id)
        assert caught.value.reason == "ILLEGAL_NODE_TRANSITION"
    with pytest.raises(FailedPreconditionError):
        await operator.complete_burn_in(node_id)
    retired = await operator.get_node(node_id)
    for cordon in (operator.cordon_node, operator.uncordon_node):
        with pytest.raises(FailedPreconditionError) as caught:
            await cordon(node_id)
        assert caught.value.reason == "NODE_RETIRED"
    assert retired.state == "RETIRED"
    assert await operator.get_node(node_id) == retired
    assert await operator.list_node_events(node_id) == events


async def test_retire_registered_node(operator: AsyncClient) -> None:
    """Retiring a just-registered node is illegal: registration has already started its burn-in."""
    await _register(operator, "node-a")
    with pytest.raises(FailedPreconditionError) as caught:
        await operator.retire_node("node-a")
    assert caught.value.reason == "ILLEGAL_NODE_TRANSITION"
    assert caught.value.metadata["state"] == "BURN_IN"


# Illegal transitions ------------------------------------------------------------------------

Setup = Callable[[AsyncClient], Awaitable[str]]


async def _ready(client: AsyncClient) -> str:
    return (await register_ready_nodes(client, 1))[0]


async def _allocated(client: AsyncClient) -> str:
    node_id = await _ready(client)
    await client.create_tenant(TENANT)
    await _allocate_one(client)
    return node_id


async def _failed_burn_in(client: AsyncClient) -> str:
    await _register(client, "node-q")
    await client.complete_burn_in("node-q", passed=False)
    return "node-q"


async def _burning_in(client: AsyncClient) -> str:
    await _register(client, "node-b")
    return "node-b"


ILLEGAL: list[tuple[str, Setup, str, str]] = [
    ("start_repair", _ready, "READY", "START_REPAIR"),
    ("retire_node", _ready, "READY", "RETIRE"),
    ("return_to_service", _ready, "READY", "RETURN_TO_SERVICE"),
    ("retire_node", _allocated, "ALLOCATED", "RETIRE"),
    ("start_repair", _allocated, "ALLOCATED", "START_REPAIR"),
    ("return_to_service", _allocated, "ALLOCATED", "RETURN_TO_SERVICE"),
    ("drain_node", _failed_burn_in, "QUARANTINED", "DRAIN"),
    ("start_repair", _burning_in, "BURN_IN", "START_REPAIR"),
]


@pytest.mark.parametrize(("method", "setup", "state", "event"), ILLEGAL, ids=[f"{m}-on-{s}" for m, _, s, _ in ILLEGAL])
async def test_illegal_transition_changes_nothing(
    operator: AsyncClient, method: str, setup: Setup, state: str, event: str
) -> None:
    """An illegal transition is FAILED_PRECONDITION ILLEGAL_NODE_TRANSITION; node and its events are unchanged."""
    node_id = await setup(operator)
    before = await operator.get_node(node_id)
    events = await operator.list_node_events(node_id)
    assert before.state == state
    with pytest.raises(FailedPreconditionError) as caught:
        await getattr(operator, method)(node_id, "should not be recorded")
    error = caught.value
    assert error.reason == "ILLEGAL_NODE_TRANSITION"
    assert error.metadata == {"node_id": node_id, "field": "node_id", "state": state, "event": event}
    after = await operator.get_node(node_id)
    assert after == before
    assert await operator.list_node_events(node_id) == events


# Events --------------------------------------------------------------------------------------


async def test_node_events_record_each_change_with_actor_and_reason(operator: AsyncClient) -> None:
    """Every state change appears once, in order, with from/to states, a time, an actor and a reason."""
    await _register(operator, "node-a")
    await operator.complete_burn_in("node-a", detail="burn-in ok")
    await operator.create_tenant(TENANT)
    allocation_id = await _allocate_one(operator)
    await _cancel_and_wait(operator, allocation_id)
    await operator.drain_node("node-a", reason="fan failure")
    await operator.start_repair("node-a", reason="replace fan")
    await operator.return_to_service("node-a", reason="fan replaced")
    await operator.complete_burn_in("node-a", passed=False, detail="still hot")
    await operator.retire_node("node-a", reason="scrap")

    events = await operator.list_node_events("node-a")
    assert _moves(events) == [
        ("REGISTER", "REGISTERED", "REGISTERED"),
        ("START_BURN_IN", "REGISTERED", "BURN_IN"),
        ("PASS_BURN_IN", "BURN_IN", "READY"),
        ("ALLOCATE", "READY", "ALLOCATED"),
        ("RELEASE", "ALLOCATED", "SCRUBBING"),
        ("FINISH_SCRUB", "SCRUBBING", "READY"),
        ("DRAIN", "READY", "QUARANTINED"),
        ("START_REPAIR", "QUARANTINED", "REPAIR"),
        ("RETURN_TO_SERVICE", "REPAIR", "BURN_IN"),
        ("FAIL_BURN_IN", "BURN_IN", "QUARANTINED"),
        ("RETIRE", "QUARANTINED", "RETIRED"),
    ]
    # Each event continues from where the previous one left the node.
    for previous, current in itertools.pairwise(events):
        assert current.from_state == previous.to_state
    assert all(e.node_id == "node-a" for e in events)
    times = [e.time for e in events if e.time is not None]
    assert len(times) == len(events)
    assert times == sorted(times)
    by_event = {e.event: e for e in events}
    assert by_event["PASS_BURN_IN"].reason == "burn-in ok"
    assert by_event["ALLOCATE"].reason == allocation_id
    assert by_event["RELEASE"].reason == f"{allocation_id} cancelled"
    assert by_event["DRAIN"].reason == "fan failure"
    assert by_event["START_REPAIR"].reason == "replace fan"
    assert by_event["RETURN_TO_SERVICE"].reason == "fan replaced"
    assert by_event["FAIL_BURN_IN"].reason == "still hot"
    assert by_event["RETIRE"].reason == "scrap"
    operator_actor = by_event["DRAIN"].actor
    assert operator_actor.startswith("operator:")
    # The operator allocated on the tenant's behalf: the event names who asked.
    for name in ("START_BURN_IN", "PASS_BURN_IN", "ALLOCATE", "RELEASE", "START_REPAIR", "RETURN_TO_SERVICE", "RETIRE"):
        assert by_event[name].actor == operator_actor, name
    # The scrub is finished by the control plane itself, not by the operator who cancelled.
    assert "control-plane" in by_event["FINISH_SCRUB"].actor
    assert by_event["FINISH_SCRUB"].actor != operator_actor
    # Who registered the node is part of its history too.
    assert by_event["REGISTER"].actor == operator_actor
    assert all(e.actor and e.reason for e in events), [(e.event, e.actor, e.reason) for e in events]


async def test_state_change_time_moves_only_on_a_state_change(operator: AsyncClient) -> None:
    """state_change_time advances when the state changes and not on a cordon."""
    await _register(operator, "node-a")
    ready = await operator.complete_burn_in("node-a")
    cordoned = await operator.cordon_node("node-a")
    assert cordoned.state_change_time == ready.state_change_time
    drained = await operator.drain_node("node-a")
    assert ready.state_change_time is not None
    assert drained.state_change_time is not None
    assert drained.state_change_time >= ready.state_change_time
    assert drained.create_time == ready.create_time


# Listing -------------------------------------------------------------------------------------


async def _fleet(client: AsyncClient) -> None:
    """a-000..a-002 H100 zone-a READY; b-000..b-001 A100 zone-b READY; c-000 H100 zone-b BURN_IN;
    d-000 H100 zone-a QUARANTINED."""
    await register_ready_nodes(client, 3, prefix="a")
    await register_ready_nodes(client, 2, prefix="b", gpu_model="A100", zone="zone-b")
    await _register(client, "c-000", zone="zone-b")
    await _register(client, "d-000")
    await client.complete_burn_in("d-000", passed=False)


def _ids(nodes: Iterable[Node]) -> list[str]:
    return [n.node_id for n in nodes]


NODE_FILTERS: list[tuple[dict[str, Any], list[str]]] = [
    ({}, ["a-000", "a-001", "a-002", "b-000", "b-001", "c-000", "d-000"]),
    ({"state": "READY"}, ["a-000", "a-001", "a-002", "b-000", "b-001"]),
    ({"state": "BURN_IN"}, ["c-000"]),
    ({"state": "QUARANTINED"}, ["d-000"]),
    ({"state": "RETIRED"}, []),
    ({"gpu_model": "A100"}, ["b-000", "b-001"]),
    ({"gpu_model": "L40S"}, []),
    ({"zone": "zone-b"}, ["b-000", "b-001", "c-000"]),
    ({"zone": "zone-c"}, []),
    ({"state": "READY", "gpu_model": "H100"}, ["a-000", "a-001", "a-002"]),
    ({"gpu_model": "H100", "zone": "zone-b"}, ["c-000"]),
    ({"state": "READY", "gpu_model": "H100", "zone": "zone-a"}, ["a-000", "a-001", "a-002"]),
]


async def test_list_nodes_filters(operator: AsyncClient) -> None:
    """list_nodes returns exactly the nodes matching every given filter (state, model, zone), ordered by id."""
    await _fleet(operator)
    mismatches = []
    for filters, expected in NODE_FILTERS:
        page = await operator.list_nodes(**filters)
        if _ids(page) != expected or page.next_page_token:
            mismatches.append((filters, _ids(page), expected, page.next_page_token))
    assert mismatches == []


async def test_list_nodes_pages_through_everything_once(operator: AsyncClient) -> None:
    """Paging with page_size 2 returns every node exactly once, in id order, and ends with no token."""
    await _fleet(operator)
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await operator.list_nodes(page_size=2, page_token=token)
        assert len(page) <= 2
        seen += _ids(page)
        pages += 1
        if not page.next_page_token:
            break
        token = page.next_page_token
    assert seen == ["a-000", "a-001", "a-002", "b-000", "b-001", "c-000", "d-000"]
    assert pages == 4


async def test_list_nodes_paging_with_filter_and_inserts(operator: AsyncClient) -> None:
    """A filtered listing pages correctly, and a node added after the cursor still appears once."""
    await _fleet(operator)
    first = await operator.list_nodes(state="READY", page_size=3)
    assert _ids(first) == ["a-000", "a-001", "a-002"]
    await register_ready_nodes(operator, 1, prefix="e")
    await register_ready_nodes(operator, 1, prefix="0")  # sorts before the cursor: not repeated
    rest = await operator.list_nodes(state="READY", page_size=3, page_token=first.next_page_token)
    assert _ids(rest) == ["b-000", "b-001", "e-000"]
    assert rest.next_page_token == ""


class _NodeFilters(TypedDict, total=False):
    """The list_nodes filters a page token is tried with."""

    state: str
    zone: str


async def test_page_token_of_other_filter_is_refused(operator: AsyncClient) -> None:
    """A page token used with other filters is INVALID_ARGUMENT naming page_token."""
    await _fleet(operator)
    page = await operator.list_nodes(state="READY", page_size=1)
    assert page.next_page_token
    other_filters: tuple[_NodeFilters, ...] = ({"state": "BURN_IN"}, {"state": "READY", "zone": "zone-a"}, {})
    for other in other_filters:
        with pytest.raises(InvalidArgumentError) as caught:
            await operator.list_nodes(page_size=1, page_token=page.next_page_token, **other)
        assert set(caught.value.field_violations) == {"page_token"}
        assert caught.value.reason == "INVALID_PAGE_TOKEN"


async def test_page_size_is_capped_and_exact_page_has_no_token(operator: AsyncClient) -> None:
    """A page_size equal to the number of nodes returns them all with no next token; a huge one is capped."""
    await _fleet(operator)
    exact = await operator.list_nodes(page_size=7)
    assert len(exact) == 7
    assert exact.next_page_token == ""
    huge = await operator.list_nodes(page_size=2**31 - 1)
    assert len(huge) == 7
    assert huge.next_page_token == ""


# Health, reflection, unknown methods --------------------------------------------------------


async def test_health_check_needs_no_token(control_plane: RunningControlPlane) -> None:
    """The standard health service answers SERVING, overall and per service, without a token."""
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "gpucloud.v1.NodeService", "gpucloud.v1.AllocationService"):
            response = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert response.status == health_pb2.HealthCheckResponse.SERVING, service
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_reflection_lists_services_without_token(control_plane: RunningControlPlane) -> None:
    """Server reflection lists every API service, health and reflection, without a token."""
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        call = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
        names: set[str] = set()
        async for response in call:
            assert not response.HasField("error_response"), response.error_response
            names |= {s.name for s in response.list_services_response.service}
    assert {
        "gpucloud.v1.TenantService",
        "gpucloud.v1.NodeService",
        "gpucloud.v1.AllocationService",
        "google.longrunning.Operations",
        "grpc.health.v1.Health",
    } <= names


async def test_reflection_describes_a_service(control_plane: RunningControlPlane) -> None:
    """Reflection returns the file descriptor that defines gpucloud.v1.AllocationService."""
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(file_containing_symbol="gpucloud.v1.AllocationService")
        responses = [r async for r in stub.ServerReflectionInfo(iter([request]), timeout=10)]
    assert len(responses) == 1
    assert responses[0].file_descriptor_response.file_descriptor_proto


async def test_unknown_method_is_unimplemented(control_plane: RunningControlPlane) -> None:
    """A method the server does not have is UNIMPLEMENTED, with or without a token (not UNAUTHENTICATED)."""
    methods = ["/gpucloud.v1.NodeService/Nope", "/gpucloud.v1.NoSuchService/Get", "/grpc.health.v1.Health/Nope"]
    codes = {}
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        for method in methods:
            for metadata in ((), (("authorization", f"Bearer {control_plane.operator_token}"),)):
                call = channel.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call(b"", metadata=metadata, timeout=10)
                codes[(method, bool(metadata))] = caught.value.code()
    assert set(codes.values()) == {grpc.StatusCode.UNIMPLEMENTED}, codes


async def test_node_events_page_oldest_first_without_repeats(operator: AsyncClient) -> None:
    """ListNodeEvents pages a long history oldest first, each event once, and refuses a foreign token."""
    await register_ready_nodes(operator, 2)
    for _ in range(3):
        await operator.cordon_node("node-000", "maintenance window")
        await operator.drain_node("node-000", "fan")
        await operator.return_to_service("node-000", "fixed")
        await operator.complete_burn_in("node-000")
    everything = await operator.list_node_events("node-000", page_size=1000)
    assert not everything.next_page_token
    paged: list[NodeEvent] = []
    token = ""
    for _ in range(20):
        page = await operator.list_node_events("node-000", page_size=4, page_token=token)
        assert len(page) <= 4
        paged.extend(page)
        token = page.next_page_token
        if not token:
            break
    assert paged == everything.items
    # Register, start and pass burn-in; then cordon, drain, return and pass per round.
    assert len(paged) == 3 + 3 * 4
    first_page = await operator.list_node_events("node-000", page_size=4)
    with pytest.raises(InvalidArgumentError) as caught:
        await operator.list_node_events("node-001", page_size=4, page_token=first_page.next_page_token)
    assert "page_token" in caught.value.field_violations

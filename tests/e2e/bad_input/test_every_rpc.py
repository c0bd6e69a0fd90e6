"""Bad input on every RPC: the right code, the bad field named, and nothing changed.

Requests go through raw generated stubs so that values the typed client refuses (unknown enum
numbers, negative counts, oversized strings) reach the server exactly as a foreign client
would send them. After each refused call the test compares what the API shows (tenants, nodes
and their events, allocations, operations) and every row of every table (which also covers
tokens, GPUs, assignments and idempotency keys) with the state before any bad call was made.
The property-based tests, which send many requests, compare the tables only: every API view
is derived from them.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlmodel import SQLModel

import services.store.models  # noqa: F401  (registers every table on SQLModel.metadata)
from clients import AsyncClient
from clients.errors import GpucloudError, from_rpc_error
from gpucloud.v1 import allocation_pb2, allocation_pb2_grpc, node_pb2, node_pb2_grpc, tenant_pb2, tenant_pb2_grpc
from services.validation import ID_PATTERN
from tests.conftest import RunningControlPlane, gpu_uuids, register_ready_nodes

TENANT = "acme"
SETUP_REQUEST_ID = "setup-request-1"
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
# Independent restatements of the API's rules, so the tests do not reuse the code under test.
ID_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
GPU_UUID_RE = re.compile(r"GPU-[0-9A-Za-z-]{1,92}")
KNOWN_GPU_MODELS = frozenset(range(1, 6))
KNOWN_NODE_STATES = frozenset(range(1, 10))
KNOWN_ALLOCATION_STATES = frozenset(range(1, 4))
HYPOTHESIS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# An enum field carries any int32 on the wire: these give a number, named or not, the field's type.
def _as_gpu_model(number: int) -> node_pb2.GpuModel.ValueType:
    return node_pb2.GpuModel.ValueType(number)


def _as_node_state(number: int) -> node_pb2.NodeState.ValueType:
    return node_pb2.NodeState.ValueType(number)


def _as_allocation_state(number: int) -> allocation_pb2.AllocationState.ValueType:
    return allocation_pb2.AllocationState.ValueType(number)


@dataclass
class World:
    """A running control plane with a tenant, two nodes, a live and a cancelled allocation."""

    plane: RunningControlPlane
    client: AsyncClient
    channel: grpc.aio.Channel
    held_node: str
    free_node: str
    allocation_id: str
    done_operation: str
    nodes_page_token: str
    database: AsyncEngine
    # What everything looked like before any bad call; every refused call must leave it so.
    baseline: tuple[object, ...] = ()
    tables: dict[str, list[tuple[object, ...]]] = field(default_factory=dict)

    @property
    def stubs(self) -> dict[str, Any]:
        return {
            "tenant": tenant_pb2_grpc.TenantServiceStub(self.channel),
            "node": node_pb2_grpc.NodeServiceStub(self.channel),
            "allocation": allocation_pb2_grpc.AllocationServiceStub(self.channel),
            # googleapis-common-protos ships this module without annotations.
            "operations": operations_pb2_grpc.OperationsStub(self.channel),
        }

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The operator's credentials."""
        return (("authorization", f"Bearer {self.plane.operator_token}"),)

    async def call(self, service: str, method: str, request: Message) -> GpucloudError | None:
        """Send ``request`` with the operator token; the parsed error, or None on success."""
        try:
            await getattr(self.stubs[service], method)(request, metadata=self.metadata, timeout=15)
        except grpc.aio.AioRpcError as error:
            return from_rpc_error(error)
        return None

    async def snapshot(self) -> tuple[object, ...]:
        """Everything a caller can see, for comparing before and after a refused call."""
        c = self.client
        tenants, nodes, allocations, operations, *events = await asyncio.gather(
            c.list_tenants(page_size=1000),
            c.list_nodes(page_size=1000),
            c.list_allocations(page_size=1000),
            c.list_operations(page_size=1000),
            c.list_node_events(self.held_node),
            c.list_node_events(self.free_node),
        )
        return tenants, nodes, allocations, operations, events

    async def rows(self) -> dict[str, list[tuple[object, ...]]]:
        """Every row of every table of the schema, in primary-key order, but ``leases``: the
        node reconciler's holder renews its lease every few seconds, whatever the calls do."""
        tables = sorted((t for t in SQLModel.metadata.tables.values() if t.name != "leases"), key=lambda t: t.name)
        async with self.database.connect() as connection:
            return {
                t.name: [tuple(r) for r in await connection.execute(select(t).order_by(*t.primary_key.columns))]
                for t in tables
            }


@pytest.fixture
async def world(control_plane: RunningControlPlane, operator: AsyncClient) -> AsyncIterator[World]:
    await operator.create_tenant(TENANT, "Acme Corp")
    held, free = await register_ready_nodes(operator, 2)
    cancelled = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id=TENANT)
    operation = await operator.cancel_allocation(cancelled.allocation_id)
    assert (await operator.wait_operation(operation.name, timeout=20)).done
    live = await operator.create_allocation(
        gpu_model="H100", node_count=1, tenant_id=TENANT, request_id=SETUP_REQUEST_ID
    )
    held_node = live.node_ids[0]
    free_node = free if held_node == held else held
    nodes_page = await operator.list_nodes(page_size=1)
    assert nodes_page.next_page_token
    database = create_async_engine(control_plane.config.database_url or "")
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        created = World(
            plane=control_plane,
            client=operator,
            channel=channel,
            held_node=held_node,
            free_node=free_node,
            allocation_id=live.allocation_id,
            done_operation=operation.name,
            nodes_page_token=nodes_page.next_page_token,
            database=database,
        )
        created.baseline = await created.snapshot()
        created.tables = await created.rows()
        try:
            yield created
        finally:
            await database.dispose()


@dataclass(frozen=True)
class Case:
    """One bad request and what the server must answer."""

    label: str
    service: str
    method: str
    request: Message
    code: grpc.StatusCode
    # INVALID_ARGUMENT: exactly the fields the BadRequest must name. NOT_FOUND: metadata["field"].
    fields: frozenset[str] = frozenset()
    reason: str | None = None


def invalid(label: str, service: str, method: str, request: Message, *fields: str, reason: str | None = None) -> Case:
    return Case(label, service, method, request, INVALID, frozenset(fields), reason)


def not_found(label: str, service: str, method: str, request: Message, field: str) -> Case:
    return Case(label, service, method, request, NOT_FOUND, frozenset({field}))


async def check_cases(world: World, cases: list[Case], *, through_api: bool = True) -> None:
    """Run every case, collecting every mismatch, so one failure report shows all of them.

    Each call must leave every table as it was; ``through_api`` also compares the API's view.
    """
    problems: list[str] = []
    for case in cases:
        error = await world.call(case.service, case.method, case.request)
        if through_api:
            after = await world.snapshot()
            if after != world.baseline:
                problems.append(f"{case.label}: the call changed what the API shows")
                world.baseline = after  # report each change once, at the call that made it
        rows = await world.rows()
        if rows != world.tables:
            changed = sorted(name for name in rows if rows[name] != world.tables.get(name))
            problems.append(f"{case.label}: the call changed the tables {changed}")
            world.tables = rows
        if error is None:
            problems.append(f"{case.label}: succeeded, expected {case.code.name}")
            continue
        if error.code != case.code:
            problems.append(f"{case.label}: got {error.code.name} ({error}), expected {case.code.name}")
        elif case.code == INVALID and set(error.field_violations) != case.fields:
            problems.append(
                f"{case.label}: field violations {sorted(error.field_violations)}, expected {sorted(case.fields)}"
            )
        elif case.code == NOT_FOUND and {error.metadata.get("field")} != case.fields:
            problems.append(f"{case.label}: NOT_FOUND metadata {error.metadata}, expected field {set(case.fields)}")
        if case.reason is not None and error.reason != case.reason:
            problems.append(f"{case.label}: reason {error.reason!r}, expected {case.reason!r}")
        if len(str(error)) > 1024:
            problems.append(f"{case.label}: error message is {len(str(error))} characters long")
    assert not problems, "\n".join(problems)


# Requests ------------------------------------------------------------------------------------


def register_request(node_id: str = "node-new", **overrides: Any) -> node_pb2.RegisterNodeRequest:
    fields: dict[str, Any] = {
        "node_id": node_id,
        "gpu_model": node_pb2.GPU_MODEL_H100,
        "gpus": [node_pb2.Gpu(uuid=u, index=i) for i, u in enumerate(gpu_uuids(node_id))],
        "zone": "zone-a",
        "rack": "rack-0",
        "leaf_switch": "leaf-0",
    }
    fields.update(overrides)
    return node_pb2.RegisterNodeRequest(**fields)


def gpus(uuids: list[str], indexes: list[int] | None = None) -> list[node_pb2.Gpu]:
    return [node_pb2.Gpu(uuid=u, index=i) for u, i in zip(uuids, indexes or range(len(uuids)), strict=True)]


def create_allocation(**overrides: Any) -> allocation_pb2.CreateAllocationRequest:
    # Refused rather than queued when it does not fit: a bad request leaves nothing behind.
    fields: dict[str, Any] = {
        "tenant_id": TENANT,
        "gpu_model": node_pb2.GPU_MODEL_H100,
        "node_count": 1,
        "fail_if_unavailable": True,
    }
    fields.update(overrides)
    return allocation_pb2.CreateAllocationRequest(**fields)


ALLOCATION_ID_RPCS: dict[str, type[Message]] = {
    "GetAllocation": allocation_pb2.GetAllocationRequest,
    "ExplainAllocation": allocation_pb2.ExplainAllocationRequest,
    "CancelAllocation": allocation_pb2.CancelAllocationRequest,
}

NODE_ID_RPCS: dict[str, type[Message]] = {
    "GetNode": node_pb2.GetNodeRequest,
    "CompleteBurnIn": node_pb2.CompleteBurnInRequest,
    "CordonNode": node_pb2.CordonNodeRequest,
    "UncordonNode": node_pb2.UncordonNodeRequest,
    "DrainNode": node_pb2.DrainNodeRequest,
    "StartRepair": node_pb2.StartRepairRequest,
    "ReturnToService": node_pb2.ReturnToServiceRequest,
    "RetireNode": node_pb2.RetireNodeRequest,
    "ListNodeEvents": node_pb2.ListNodeEventsRequest,
}
REASON_RPCS = ("CordonNode", "DrainNode", "StartRepair", "ReturnToService", "RetireNode")
OPERATION_NAME_RPCS: dict[str, type[Message]] = {
    "GetOperation": operations_pb2.GetOperationRequest,
    "WaitOperation": operations_pb2.WaitOperationRequest,
    "DeleteOperation": operations_pb2.DeleteOperationRequest,
    "CancelOperation": operations_pb2.CancelOperationRequest,
}
LIST_RPCS: dict[str, tuple[str, type[Message]]] = {
    "ListTenants": ("tenant", tenant_pb2.ListTenantsRequest),
    "ListNodes": ("node", node_pb2.ListNodesRequest),
    "ListAllocations": ("allocation", allocation_pb2.ListAllocationsRequest),
    "ListOperations": ("operations", operations_pb2.ListOperationsRequest),
    "ListHealthEvents": ("node", node_pb2.ListHealthEventsRequest),
}


# TenantService -------------------------------------------------------------------------------


async def test_tenant_service_bad_input(world: World) -> None:
    """TenantService refuses empty, malformed, oversized and unknown input, naming the field, changing nothing."""
    t = "tenant"
    await check_cases(
        world,
        [
            invalid("create: empty id", t, "CreateTenant", tenant_pb2.CreateTenantRequest(), "tenant_id"),
            invalid(
                "create: spaces", t, "CreateTenant", tenant_pb2.CreateTenantRequest(tenant_id="Acme Corp"), "tenant_id"
            ),
            invalid(
                "create: 64 chars", t, "CreateTenant", tenant_pb2.CreateTenantRequest(tenant_id="a" * 64), "tenant_id"
            ),
            invalid(
                "create: leading -", t, "CreateTenant", tenant_pb2.CreateTenantRequest(tenant_id="-acme"), "tenant_id"
            ),
            invalid(
                "create: 100k id",
                t,
                "CreateTenant",
                tenant_pb2.CreateTenantRequest(tenant_id="x" * 100_000),
                "tenant_id",
            ),
            invalid(
                "create: long name",
                t,
                "CreateTenant",
                tenant_pb2.CreateTenantRequest(tenant_id="globex", display_name="n" * 257),
                "display_name",
            ),
            invalid(
                "create: control chars in name",
                t,
                "CreateTenant",
                tenant_pb2.CreateTenantRequest(tenant_id="globex", display_name="Globex\x00\n"),
                "display_name",
            ),
            invalid(
                "create: both bad",
                t,
                "CreateTenant",
                tenant_pb2.CreateTenantRequest(tenant_id="", display_name="n" * 300),
                "tenant_id",
                "display_name",
            ),
            Case(
                "create: existing id with another name",
                t,
                "CreateTenant",
                tenant_pb2.CreateTenantRequest(tenant_id=TENANT, display_name="Someone Else"),
                grpc.StatusCode.ALREADY_EXISTS,
                reason="TENANT_EXISTS",
            ),
            invalid("get: empty", t, "GetTenant", tenant_pb2.GetTenantRequest(), "tenant_id"),
            invalid("get: upper case", t, "GetTenant", tenant_pb2.GetTenantRequest(tenant_id="ACME"), "tenant_id"),
            invalid("get: oversized", t, "GetTenant", tenant_pb2.GetTenantRequest(tenant_id="a" * 5000), "tenant_id"),
            not_found("get: unknown", t, "GetTenant", tenant_pb2.GetTenantRequest(tenant_id="ghost"), "tenant_id"),
            invalid("list: negative size", t, "ListTenants", tenant_pb2.ListTenantsRequest(page_size=-1), "page_size"),
            invalid(
                "list: min int32 size", t, "ListTenants", tenant_pb2.ListTenantsRequest(page_size=-(2**31)), "page_size"
            ),
            invalid(
                "list: garbage token",
                t,
                "ListTenants",
                tenant_pb2.ListTenantsRequest(page_token="not-a-token"),
                "page_token",
                reason="INVALID_PAGE_TOKEN",
            ),
            invalid(
                "list: oversized token",
                t,
                "ListTenants",
                tenant_pb2.ListTenantsRequest(page_token="A" * 5000),
                "page_token",
                reason="INVALID_PAGE_TOKEN",
            ),
            invalid(
                "list: token of the node listing",
                t,
                "ListTenants",
                tenant_pb2.ListTenantsRequest(page_token=world.nodes_page_token),
                "page_token",
                reason="INVALID_PAGE_TOKEN",
            ),
            invalid("token: empty", t, "CreateTenantToken", tenant_pb2.CreateTenantTokenRequest(), "tenant_id"),
            invalid(
                "token: malformed",
                t,
                "CreateTenantToken",
                tenant_pb2.CreateTenantTokenRequest(tenant_id="acme!"),
                "tenant_id",
            ),
            not_found(
                "token: unknown",
                t,
                "CreateTenantToken",
                tenant_pb2.CreateTenantTokenRequest(tenant_id="ghost"),
                "tenant_id",
            ),
        ],
    )


# NodeService ---------------------------------------------------------------------------------


async def test_spare_pool_bad_input(world: World) -> None:
    """SetSparePool names an unknown pool or a count out of range, and sets nothing."""
    n = "node"

    def request(gpu_model: int = 2, spares: int = 1) -> node_pb2.SetSparePoolRequest:
        return node_pb2.SetSparePoolRequest(gpu_model=_as_gpu_model(gpu_model), spares=spares)

    await check_cases(
        world,
        [
            invalid("model unspecified", n, "SetSparePool", request(0), "gpu_model"),
            invalid("model unknown", n, "SetSparePool", request(99), "gpu_model"),
            invalid("negative", n, "SetSparePool", request(spares=-1), "spares"),
            invalid("over 100,000", n, "SetSparePool", request(spares=100_001), "spares"),
            invalid("both", n, "SetSparePool", request(99, -5), "gpu_model", "spares"),
        ],
    )


async def test_defragmentation_bad_input(world: World) -> None:
    """PlanDefragmentation names an unknown pool or a count out of range."""
    n, m = "node", "PlanDefragmentation"

    def request(gpu_model: int = 2, blocks: int = 1, nodes: int = 4) -> node_pb2.PlanDefragmentationRequest:
        return node_pb2.PlanDefragmentationRequest(
            gpu_model=_as_gpu_model(gpu_model), blocks=blocks, max_allocation_nodes=nodes
        )

    await check_cases(
        world,
        [
            invalid("model unspecified", n, m, request(0), "gpu_model"),
            invalid("negative blocks", n, m, request(blocks=-1), "blocks"),
            invalid("too many nodes", n, m, request(nodes=10_001), "max_allocation_nodes"),
        ],
    )


async def test_apply_defragmentation_bad_input(world: World) -> None:
    """ApplyDefragmentation names a missing or malformed move, a node named twice, an allocation
    or node that does not exist, and a move the fleet does not allow; nothing moves."""
    n, m = "node", "ApplyDefragmentation"

    def move(allocation_id: str, from_node_id: str, to_node_id: str) -> node_pb2.DefragmentationMove:
        return node_pb2.DefragmentationMove(
            allocation_id=allocation_id, from_node_id=from_node_id, to_node_id=to_node_id
        )

    def request(*moves: node_pb2.DefragmentationMove) -> node_pb2.ApplyDefragmentationRequest:
        return node_pb2.ApplyDefragmentationRequest(moves=moves)

    live, held, free = world.allocation_id, world.held_node, world.free_node
    await check_cases(
        world,
        [
            invalid("no moves", n, m, request(), "moves"),
            invalid("257 moves", n, m, request(*[move(live, held, free)] * 257), "moves"),
            invalid(
                "malformed ids",
                n,
                m,
                request(move("Alloc!", "", "NODE")),
                "moves[0].allocation_id",
                "moves[0].from_node_id",
                "moves[0].to_node_id",
            ),
            invalid(
                "a node named twice",
                n,
                m,
                request(move(live, held, free), move(live, free, "node-x")),
                "moves[1].from_node_id",
            ),
            invalid("a node moved onto itself", n, m, request(move(live, held, held)), "moves[0].to_node_id"),
            not_found("no such allocation", n, m, request(move("alloc-missing", held, free)), "moves[0].allocation_id"),
            not_found("no such node", n, m, request(move(live, held, "node-missing")), "moves[0].to_node_id"),
            Case(
                "a node it does not hold",
                n,
                m,
                request(move(live, free, held)),
                grpc.StatusCode.FAILED_PRECONDITION,
                reason="MOVE_NO_LONGER_POSSIBLE",
            ),
        ],
    )


async def test_health_automation_and_events_bad_input(world: World) -> None:
    """SetHealthAutomation names an unknown pool or an oversized reason, and pauses nothing;
    ListHealthEvents names a time a Timestamp cannot hold."""
    n = "node"

    def request(gpu_model: int = 2, reason: str = "") -> node_pb2.SetHealthAutomationRequest:
        return node_pb2.SetHealthAutomationRequest(gpu_model=_as_gpu_model(gpu_model), paused=True, reason=reason)

    await check_cases(
        world,
        [
            invalid("model unspecified", n, "SetHealthAutomation", request(0), "gpu_model"),
            invalid("model unknown", n, "SetHealthAutomation", request(99), "gpu_model"),
            invalid("model negative", n, "SetHealthAutomation", request(-1), "gpu_model"),
            invalid("reason of 257", n, "SetHealthAutomation", request(reason="r" * 257), "reason"),
            invalid("both", n, "SetHealthAutomation", request(99, "r" * 257), "gpu_model", "reason"),
            invalid(
                "events since year 10000",
                n,
                "ListHealthEvents",
                node_pb2.ListHealthEventsRequest(since=Timestamp(seconds=253402300800)),
                "since",
            ),
            invalid(
                "events since, bad nanos",
                n,
                "ListHealthEvents",
                node_pb2.ListHealthEventsRequest(since=Timestamp(seconds=1, nanos=-1)),
                "since",
            ),
        ],
    )


async def test_register_node_bad_input(world: World) -> None:
    """RegisterNode names each bad inventory field (id, model, fabric position, each GPU) and registers nothing."""
    n = "node"
    good = gpu_uuids("node-new")
    duplicate = [*good[:4], good[1], *good[5:]]
    await check_cases(
        world,
        [
            invalid("empty id", n, "RegisterNode", register_request(""), "node_id"),
            invalid("bad id", n, "RegisterNode", register_request("Node_1", gpus=gpus(good)), "node_id"),
            invalid("64-char id", n, "RegisterNode", register_request("n" * 64, gpus=gpus(good)), "node_id"),
            invalid("model unspecified", n, "RegisterNode", register_request(gpu_model=0), "gpu_model"),
            invalid("model unknown", n, "RegisterNode", register_request(gpu_model=99), "gpu_model"),
            invalid("model negative", n, "RegisterNode", register_request(gpu_model=-1), "gpu_model"),
            invalid("empty zone", n, "RegisterNode", register_request(zone=""), "zone"),
            invalid("bad rack", n, "RegisterNode", register_request(rack="Rack 1"), "rack"),
            invalid("long leaf", n, "RegisterNode", register_request(leaf_switch="l" * 64), "leaf_switch"),
            invalid("no gpus", n, "RegisterNode", register_request(gpus=[]), "gpus"),
            invalid("seven gpus", n, "RegisterNode", register_request(gpus=gpus(good[:7])), "gpus"),
            invalid("nine gpus", n, "RegisterNode", register_request(gpus=gpus([*good, "GPU-extra"])), "gpus"),
            invalid(
                "malformed uuid",
                n,
                "RegisterNode",
                register_request(gpus=gpus([*good[:3], "bogus", *good[4:]])),
                "gpus[3].uuid",
            ),
            invalid("empty uuid", n, "RegisterNode", register_request(gpus=gpus(["", *good[1:]])), "gpus[0].uuid"),
            invalid(
                "oversized uuid",
                n,
                "RegisterNode",
                register_request(gpus=gpus([*good[:7], "GPU-" + "a" * 93])),
                "gpus[7].uuid",
            ),
            invalid("duplicate uuid", n, "RegisterNode", register_request(gpus=gpus(duplicate)), "gpus[4].uuid"),
            invalid(
                "duplicate index",
                n,
                "RegisterNode",
                register_request(gpus=gpus(good, [0, 1, 2, 3, 4, 5, 6, 6])),
                "gpus",
            ),
            invalid(
                "negative index",
                n,
                "RegisterNode",
                register_request(gpus=gpus(good, [-1, 1, 2, 3, 4, 5, 6, 7])),
                "gpus",
            ),
            invalid(
                "everything bad",
                n,
                "RegisterNode",
                node_pb2.RegisterNodeRequest(
                    node_id="X", gpu_model=_as_gpu_model(42), zone="", rack="", leaf_switch="!"
                ),
                "node_id",
                "gpu_model",
                "zone",
                "rack",
                "leaf_switch",
                "gpus",
            ),
            Case(
                "GPU of another node",
                n,
                "RegisterNode",
                register_request(gpus=gpus([*good[:6], gpu_uuids(world.free_node)[0], good[7]])),
                grpc.StatusCode.ALREADY_EXISTS,
                reason="GPU_ALREADY_REGISTERED",
            ),
            Case(
                "known id, other inventory",
                n,
                "RegisterNode",
                register_request(world.free_node, zone="zone-z"),
                grpc.StatusCode.ALREADY_EXISTS,
                reason="NODE_INVENTORY_MISMATCH",
            ),
        ],
    )


async def test_node_id_rpcs_bad_input(world: World) -> None:
    """Every NodeService RPC taking a node_id refuses empty, malformed and oversized ids and 404s unknown ones."""
    cases: list[Case] = []
    for method, request_type in NODE_ID_RPCS.items():
        cases += [
            invalid(f"{method}: empty", "node", method, request_type(), "node_id"),
            invalid(f"{method}: upper case", "node", method, request_type(node_id="NODE-000"), "node_id"),
            invalid(f"{method}: oversized", "node", method, request_type(node_id="n" * 100_000), "node_id"),
            invalid(f"{method}: path", "node", method, request_type(node_id="../node-000"), "node_id"),
            not_found(f"{method}: unknown", "node", method, request_type(node_id="ghost-node"), "node_id"),
        ]
    for method in REASON_RPCS:
        request_type = NODE_ID_RPCS[method]
        cases += [
            invalid(
                f"{method}: long reason",
                "node",
                method,
                request_type(node_id=world.free_node, reason="r" * 257),
                "reason",
            ),
            invalid(
                f"{method}: control chars",
                "node",
                method,
                request_type(node_id=world.free_node, reason="a\x1bb"),
                "reason",
            ),
            invalid(
                f"{method}: both bad", "node", method, request_type(node_id="", reason="r" * 1000), "node_id", "reason"
            ),
        ]
    cases += [
        invalid(
            "CompleteBurnIn: long detail",
            "node",
            "CompleteBurnIn",
            node_pb2.CompleteBurnInRequest(node_id=world.free_node, detail="d" * 257),
            "detail",
        ),
        invalid(
            "CompleteBurnIn: control chars",
            "node",
            "CompleteBurnIn",
            node_pb2.CompleteBurnInRequest(node_id=world.free_node, passed=True, detail="ok\x00"),
            "detail",
        ),
    ]
    await check_cases(world, cases)


async def test_list_nodes_bad_input(world: World) -> None:
    """ListNodes refuses negative sizes, unknown enum numbers, malformed zones and foreign page tokens."""
    n, m = "node", "ListNodes"
    await check_cases(
        world,
        [
            invalid("negative size", n, m, node_pb2.ListNodesRequest(page_size=-1), "page_size"),
            invalid("unknown state", n, m, node_pb2.ListNodesRequest(state=_as_node_state(99)), "state"),
            invalid("negative state", n, m, node_pb2.ListNodesRequest(state=_as_node_state(-3)), "state"),
            invalid("unknown model", n, m, node_pb2.ListNodesRequest(gpu_model=_as_gpu_model(42)), "gpu_model"),
            invalid("bad zone", n, m, node_pb2.ListNodesRequest(zone="Zone A"), "zone"),
            invalid("oversized zone", n, m, node_pb2.ListNodesRequest(zone="z" * 10_000), "zone"),
            invalid("garbage token", n, m, node_pb2.ListNodesRequest(page_token="%%%"), "page_token"),
            invalid(
                "token of other filter",
                n,
                m,
                node_pb2.ListNodesRequest(page_token=world.nodes_page_token, state=node_pb2.NODE_STATE_READY),
                "page_token",
                reason="INVALID_PAGE_TOKEN",
            ),
            invalid(
                "all bad",
                n,
                m,
                node_pb2.ListNodesRequest(
                    page_size=-7, state=_as_node_state(77), gpu_model=_as_gpu_model(88), zone="BAD"
                ),
                "page_size",
                "state",
                "gpu_model",
                "zone",
            ),
        ],
    )


# AllocationService ---------------------------------------------------------------------------


async def test_create_allocation_bad_input(world: World) -> None:
    """CreateAllocation refuses bad tenant, model, count and request_id, unknown tenants, and reused keys."""
    a, m = "allocation", "CreateAllocation"
    await check_cases(
        world,
        [
            invalid("no tenant (operator)", a, m, create_allocation(tenant_id=""), "tenant_id"),
            invalid("bad tenant", a, m, create_allocation(tenant_id="ACME"), "tenant_id"),
            invalid("model unspecified", a, m, create_allocation(gpu_model=0), "gpu_model"),
            invalid("model unknown", a, m, create_allocation(gpu_model=77), "gpu_model"),
            invalid("zero nodes", a, m, create_allocation(node_count=0), "node_count"),
            invalid("negative nodes", a, m, create_allocation(node_count=-1), "node_count"),
            invalid("min int32 nodes", a, m, create_allocation(node_count=-(2**31)), "node_count"),
            invalid("257 nodes", a, m, create_allocation(node_count=257), "node_count"),
            invalid("max int32 nodes", a, m, create_allocation(node_count=2**31 - 1), "node_count"),
            invalid("negative priority", a, m, create_allocation(priority=-1), "priority"),
            invalid("priority over 1000", a, m, create_allocation(priority=1001), "priority"),
            invalid("long request_id", a, m, create_allocation(request_id="r" * 65), "request_id"),
            invalid("request_id with space", a, m, create_allocation(request_id="my key"), "request_id"),
            invalid("non-ASCII request_id", a, m, create_allocation(request_id="ключ"), "request_id"),
            invalid(
                "all bad",
                a,
                m,
                create_allocation(tenant_id="", gpu_model=9, node_count=0, request_id="\n"),
                "tenant_id",
                "gpu_model",
                "node_count",
                "request_id",
            ),
            not_found("unknown tenant", a, m, create_allocation(tenant_id="ghost"), "tenant_id"),
            not_found(
                "unknown tenant with request_id",
                a,
                m,
                create_allocation(tenant_id="ghost", request_id="k1"),
                "tenant_id",
            ),
            invalid(
                "reused request_id, other request",
                a,
                m,
                create_allocation(node_count=2, request_id=SETUP_REQUEST_ID),
                "request_id",
                reason="IDEMPOTENCY_KEY_REUSED",
            ),
            Case(
                "more nodes than free",
                a,
                m,
                create_allocation(node_count=2, request_id="capacity-1"),
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                reason="INSUFFICIENT_CAPACITY",
            ),
            Case(
                "no nodes of the model",
                a,
                m,
                create_allocation(gpu_model=node_pb2.GPU_MODEL_L40S),
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                reason="INSUFFICIENT_CAPACITY",
            ),
        ],
    )


async def test_quota_bad_input(world: World) -> None:
    """SetQuota names a bad tenant, model, count or cohort and sets nothing; an unknown tenant is
    NOT_FOUND; ListQuotas names a bad tenant, and an unknown one is NOT_FOUND."""
    a, m = "allocation", "SetQuota"

    def request(**overrides: Any) -> allocation_pb2.SetQuotaRequest:
        fields: dict[str, Any] = {"tenant_id": TENANT, "gpu_model": node_pb2.GPU_MODEL_H100, "nodes": 2}
        fields.update(overrides)
        return allocation_pb2.SetQuotaRequest(**fields)

    await check_cases(
        world,
        [
            invalid("no tenant", a, m, request(tenant_id=""), "tenant_id"),
            invalid("bad tenant", a, m, request(tenant_id="Bad Tenant"), "tenant_id"),
            invalid("model unspecified", a, m, request(gpu_model=0), "gpu_model"),
            invalid("negative nodes", a, m, request(nodes=-1), "nodes"),
            invalid("borrow over 100,000", a, m, request(borrow_limit=100_001), "borrow_limit"),
            invalid("bad cohort", a, m, request(cohort="Lab One"), "cohort"),
            not_found("unknown tenant", a, m, request(tenant_id="ghost"), "tenant_id"),
            invalid(
                "list: bad tenant", a, "ListQuotas", allocation_pb2.ListQuotasRequest(tenant_id="Bad"), "tenant_id"
            ),
            not_found(
                "list: unknown tenant",
                a,
                "ListQuotas",
                allocation_pb2.ListQuotasRequest(tenant_id="ghost"),
                "tenant_id",
            ),
        ],
    )


async def test_other_allocation_rpcs_bad_input(world: World) -> None:
    """Get/Explain/List/CancelAllocation refuse empty, oversized and control-char ids, bad filters
    and tokens; 404 unknown."""
    a = "allocation"
    cases: list[Case] = []
    for method, request_type in (
        ("GetAllocation", allocation_pb2.GetAllocationRequest),
        ("ExplainAllocation", allocation_pb2.ExplainAllocationRequest),
        ("CancelAllocation", allocation_pb2.CancelAllocationRequest),
    ):
        cases += [
            invalid(f"{method}: empty", a, method, request_type(), "allocation_id"),
            invalid(f"{method}: 65 chars", a, method, request_type(allocation_id="a" * 65), "allocation_id"),
            invalid(f"{method}: 100k chars", a, method, request_type(allocation_id="a" * 100_000), "allocation_id"),
            invalid(f"{method}: newline", a, method, request_type(allocation_id="alloc-1\n"), "allocation_id"),
            invalid(f"{method}: punctuation", a, method, request_type(allocation_id="a b/c%'\""), "allocation_id"),
            invalid(f"{method}: upper case", a, method, request_type(allocation_id="ALLOC-1"), "allocation_id"),
            not_found(f"{method}: unknown", a, method, request_type(allocation_id="alloc-ghost"), "allocation_id"),
        ]
    m = "ListAllocations"
    cases += [
        invalid("list: negative size", a, m, allocation_pb2.ListAllocationsRequest(page_size=-1), "page_size"),
        invalid("list: bad tenant", a, m, allocation_pb2.ListAllocationsRequest(tenant_id="Bad Tenant"), "tenant_id"),
        not_found("list: unknown tenant", a, m, allocation_pb2.ListAllocationsRequest(tenant_id="ghost"), "tenant_id"),
        invalid(
            "list: unknown state", a, m, allocation_pb2.ListAllocationsRequest(state=_as_allocation_state(9)), "state"
        ),
        invalid(
            "list: negative state", a, m, allocation_pb2.ListAllocationsRequest(state=_as_allocation_state(-1)), "state"
        ),
        invalid("list: garbage token", a, m, allocation_pb2.ListAllocationsRequest(page_token="nope"), "page_token"),
        invalid(
            "list: token of the node listing",
            a,
            m,
            allocation_pb2.ListAllocationsRequest(page_token=world.nodes_page_token),
            "page_token",
        ),
        invalid(
            "list: all bad",
            a,
            m,
            allocation_pb2.ListAllocationsRequest(page_size=-2, tenant_id="-x", state=_as_allocation_state(12)),
            "page_size",
            "tenant_id",
            "state",
        ),
    ]
    await check_cases(world, cases)


# google.longrunning.Operations ---------------------------------------------------------------


async def test_operations_bad_input(world: World) -> None:
    """Operations refuses malformed names, negative timeouts, filters and bad tokens; 404s unknown operations."""
    o = "operations"
    cases: list[Case] = []
    for method, request_type in OPERATION_NAME_RPCS.items():
        cases += [
            invalid(f"{method}: empty", o, method, request_type(), "name"),
            invalid(f"{method}: no prefix", o, method, request_type(name="op-123"), "name"),
            invalid(f"{method}: prefix only", o, method, request_type(name="operations/"), "name"),
            invalid(f"{method}: oversized", o, method, request_type(name="operations/" + "x" * 200), "name"),
            invalid(f"{method}: 100k", o, method, request_type(name="operations/" + "x" * 100_000), "name"),
            invalid(f"{method}: NUL", o, method, request_type(name="operations/op\x00ghost"), "name"),
            invalid(f"{method}: newline", o, method, request_type(name="operations/op-ghost\n"), "name"),
            not_found(f"{method}: unknown", o, method, request_type(name="operations/op-ghost"), "name"),
        ]
    negative = Duration(seconds=-1)
    cases += [
        invalid(
            "WaitOperation: negative timeout",
            o,
            "WaitOperation",
            operations_pb2.WaitOperationRequest(name=world.done_operation, timeout=negative),
            "timeout",
        ),
        invalid(
            "WaitOperation: timeout beyond Duration's range",
            o,
            "WaitOperation",
            operations_pb2.WaitOperationRequest(name=world.done_operation, timeout=Duration(seconds=2**62)),
            "timeout",
        ),
        invalid(
            "WaitOperation: bad name and bad timeout, both named at once",
            o,
            "WaitOperation",
            operations_pb2.WaitOperationRequest(name="bogus", timeout=negative),
            "name",
            "timeout",
        ),
        invalid(
            "WaitOperation: hugely negative timeout",
            o,
            "WaitOperation",
            operations_pb2.WaitOperationRequest(name=world.done_operation, timeout=Duration(seconds=-(2**62))),
            "timeout",
        ),
        Case(
            "CancelOperation: a cancel cannot be cancelled",
            o,
            "CancelOperation",
            operations_pb2.CancelOperationRequest(name=world.done_operation),
            grpc.StatusCode.FAILED_PRECONDITION,
            reason="OPERATION_NOT_CANCELLABLE",
        ),
        invalid(
            "list: negative size", o, "ListOperations", operations_pb2.ListOperationsRequest(page_size=-1), "page_size"
        ),
        invalid(
            "list: filter", o, "ListOperations", operations_pb2.ListOperationsRequest(filter="done=true"), "filter"
        ),
        invalid("list: other parent", o, "ListOperations", operations_pb2.ListOperationsRequest(name="x"), "name"),
        invalid(
            "list: 10k parent", o, "ListOperations", operations_pb2.ListOperationsRequest(name="x" * 10_000), "name"
        ),
        invalid(
            "list: garbage token",
            o,
            "ListOperations",
            operations_pb2.ListOperationsRequest(page_token="zzz"),
            "page_token",
        ),
        invalid(
            "list: size and filter",
            o,
            "ListOperations",
            operations_pb2.ListOperationsRequest(page_size=-1, filter="x"),
            "page_size",
            "filter",
        ),
    ]
    await check_cases(world, cases)


async def test_list_operations_accepts_the_collection_as_its_parent(world: World) -> None:
    """ListOperationsRequest.name is the parent collection: empty and "operations" list the same."""
    unnamed = await world.stubs["operations"].ListOperations(
        operations_pb2.ListOperationsRequest(), metadata=world.metadata, timeout=15
    )
    named = await world.stubs["operations"].ListOperations(
        operations_pb2.ListOperationsRequest(name="operations"), metadata=world.metadata, timeout=15
    )
    assert [o.name for o in named.operations] == [o.name for o in unnamed.operations]
    assert world.done_operation in [o.name for o in named.operations]


async def test_one_error_names_page_size_and_page_token(world: World) -> None:
    """A list request with both a negative page_size and a garbage page_token names both fields in one error."""
    await check_cases(
        world,
        [
            invalid(
                method, service, method, request_type(page_size=-1, page_token="garbage"), "page_size", "page_token"
            )
            for method, (service, request_type) in LIST_RPCS.items()
        ],
    )


# Properties ----------------------------------------------------------------------------------


@HYPOTHESIS
@given(
    node_id=st.one_of(st.text(max_size=100), st.from_regex(ID_RE, fullmatch=True)),
    method=st.sampled_from(list(NODE_ID_RPCS)),
)
async def test_any_node_id_is_invalid_or_not_found(world: World, node_id: str, method: str) -> None:
    """Any text as a node_id is INVALID_ARGUMENT naming node_id, or NOT_FOUND when well formed, and changes nothing."""
    assume(node_id not in {world.held_node, world.free_node})
    expected = (
        not_found(method, "node", method, NODE_ID_RPCS[method](node_id=node_id), "node_id")
        if ID_RE.fullmatch(node_id)
        else invalid(method, "node", method, NODE_ID_RPCS[method](node_id=node_id), "node_id")
    )
    await check_cases(world, [expected], through_api=False)


@HYPOTHESIS
@given(
    tenant_id=st.one_of(st.text(max_size=100), st.from_regex(ID_RE, fullmatch=True)),
    method=st.sampled_from(["GetTenant", "CreateTenantToken"]),
)
async def test_any_tenant_id_is_invalid_or_not_found(world: World, tenant_id: str, method: str) -> None:
    """Any text as a tenant_id is INVALID_ARGUMENT naming tenant_id, or NOT_FOUND when well formed."""
    assume(tenant_id != TENANT)
    request_type = tenant_pb2.GetTenantRequest if method == "GetTenant" else tenant_pb2.CreateTenantTokenRequest
    request = request_type(tenant_id=tenant_id)
    case = (
        not_found(method, "tenant", method, request, "tenant_id")
        if ID_RE.fullmatch(tenant_id)
        else invalid(method, "tenant", method, request, "tenant_id")
    )
    await check_cases(world, [case], through_api=False)


@HYPOTHESIS
@given(allocation_id=st.text(max_size=120), method=st.sampled_from(list(ALLOCATION_ID_RPCS)))
async def test_any_allocation_id_is_invalid_or_not_found(world: World, allocation_id: str, method: str) -> None:
    """Any text as an allocation_id is INVALID_ARGUMENT (not an id's shape) or NOT_FOUND; never a cancel."""
    assume(allocation_id != world.allocation_id)
    request = ALLOCATION_ID_RPCS[method](allocation_id=allocation_id)
    well_formed = ID_RE.fullmatch(allocation_id) is not None
    case = (
        not_found(method, "allocation", method, request, "allocation_id")
        if well_formed
        else invalid(method, "allocation", method, request, "allocation_id")
    )
    await check_cases(world, [case], through_api=False)


@HYPOTHESIS
@given(
    name=st.one_of(st.text(max_size=150), st.text(max_size=60).map(lambda s: "operations/" + s)),
    method=st.sampled_from(list(OPERATION_NAME_RPCS)),
)
async def test_any_operation_name_is_invalid_or_not_found(world: World, name: str, method: str) -> None:
    """Any operation name is INVALID_ARGUMENT naming name unless shaped operations/<id> (NOT_FOUND); never INTERNAL."""
    assume(name != world.done_operation)
    request_type = OPERATION_NAME_RPCS[method]
    request = request_type(name=name)
    if method == "WaitOperation":
        request = operations_pb2.WaitOperationRequest(name=name, timeout=Duration(seconds=0))
    controls = any(unicodedata.category(c) == "Cc" for c in name)
    # Unassigned or format code points are neither clearly bad nor clearly fine: not judged here.
    assume(controls or name.isprintable())
    shaped = name.startswith("operations/") and ID_PATTERN.fullmatch(name.removeprefix("operations/")) is not None
    case = (
        not_found(method, "operations", method, request, "name")
        if shaped
        else invalid(method, "operations", method, request, "name")
    )
    await check_cases(world, [case], through_api=False)


MAX_DURATION_SECONDS = 315_576_000_000  # google.protobuf.Duration's documented range: +-10,000 years


@HYPOTHESIS
@given(seconds=st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.integers(-5, 5)))
async def test_wait_operation_any_timeout(world: World, seconds: int) -> None:
    """WaitOperation refuses a negative or out-of-range timeout naming timeout; any other returns the done op."""
    request = operations_pb2.WaitOperationRequest(name=world.done_operation, timeout=Duration(seconds=seconds))
    error = await world.call("operations", "WaitOperation", request)
    if seconds < 0:
        assert error is not None, error
        assert error.code == INVALID, error
        assert set(error.field_violations) == {"timeout"}, error
    elif seconds <= MAX_DURATION_SECONDS:
        assert error is None, error
    else:
        # Beyond Duration's range: refusing it or capping it are both fine; failing inside is not.
        assert error is None or (error.code == INVALID and set(error.field_violations) == {"timeout"}), error
    assert await world.rows() == world.tables


@HYPOTHESIS
@given(state=INT32, gpu_model=INT32)
async def test_list_nodes_any_enum_numbers(world: World, state: int, gpu_model: int) -> None:
    """ListNodes accepts known (or zero) state/model numbers and names each unknown one as INVALID_ARGUMENT."""
    bad = {
        name
        for name, value, known in (("state", state, KNOWN_NODE_STATES), ("gpu_model", gpu_model, KNOWN_GPU_MODELS))
        if value and value not in known
    }
    request = node_pb2.ListNodesRequest(state=_as_node_state(state), gpu_model=_as_gpu_model(gpu_model))
    error = await world.call("node", "ListNodes", request)
    if bad:
        assert error is not None, error
        assert error.code == INVALID, error
        assert set(error.field_violations) == bad
    else:
        assert error is None, error
    assert await world.rows() == world.tables


@HYPOTHESIS
@given(state=INT32)
async def test_list_allocations_any_state_number(world: World, state: int) -> None:
    """ListAllocations accepts known (or zero) states and refuses any other number naming state."""
    error = await world.call(
        "allocation", "ListAllocations", allocation_pb2.ListAllocationsRequest(state=_as_allocation_state(state))
    )
    if state == 0 or state in KNOWN_ALLOCATION_STATES:
        assert error is None, error
    else:
        assert error is not None, error
        assert error.code == INVALID, error
        assert set(error.field_violations) == {"state"}, error
    assert await world.rows() == world.tables


@HYPOTHESIS
@given(gpu_model=INT32.filter(lambda v: v not in KNOWN_GPU_MODELS))
async def test_create_allocation_any_unknown_model(world: World, gpu_model: int) -> None:
    """CreateAllocation refuses every unknown or unspecified gpu_model number, naming gpu_model."""
    await check_cases(
        world,
        [invalid("model", "allocation", "CreateAllocation", create_allocation(gpu_model=gpu_model), "gpu_model")],
        through_api=False,
    )


@HYPOTHESIS
@given(node_count=INT32.filter(lambda n: n != 1))
async def test_create_allocation_any_node_count(world: World, node_count: int) -> None:
    """node_count outside 1-256 is INVALID_ARGUMENT naming node_count; inside but over capacity RESOURCE_EXHAUSTED."""
    request = create_allocation(node_count=node_count)
    case = (
        Case("count", "allocation", "CreateAllocation", request, grpc.StatusCode.RESOURCE_EXHAUSTED)
        if 1 <= node_count <= 256
        else invalid("count", "allocation", "CreateAllocation", request, "node_count")
    )
    await check_cases(world, [case], through_api=False)


@HYPOTHESIS
@given(page_size=st.integers(min_value=-(2**31), max_value=-1), method=st.sampled_from(list(LIST_RPCS)))
async def test_any_negative_page_size(world: World, page_size: int, method: str) -> None:
    """Every list RPC refuses every negative page_size, naming page_size."""
    service, request_type = LIST_RPCS[method]
    await check_cases(
        world, [invalid(method, service, method, request_type(page_size=page_size), "page_size")], through_api=False
    )


@HYPOTHESIS
@given(page_token=st.text(min_size=1, max_size=1100), method=st.sampled_from(list(LIST_RPCS)))
async def test_any_page_token_is_refused(world: World, page_token: str, method: str) -> None:
    """Every list RPC refuses an arbitrary page_token with INVALID_ARGUMENT naming page_token."""
    service, request_type = LIST_RPCS[method]
    case = invalid(
        method, service, method, request_type(page_token=page_token), "page_token", reason="INVALID_PAGE_TOKEN"
    )
    await check_cases(world, [case], through_api=False)


@HYPOTHESIS
@given(reason=st.text(min_size=257, max_size=600), method=st.sampled_from(REASON_RPCS))
async def test_any_oversized_reason(world: World, reason: str, method: str) -> None:
    """A reason over 256 characters is refused naming reason, even on a node where the move would be legal."""
    request = NODE_ID_RPCS[method](node_id=world.free_node, reason=reason)
    await check_cases(world, [invalid(method, "node", method, request, "reason")], through_api=False)


def _valid_gpus(items: list[tuple[str, int]]) -> bool:
    uuids = [u for u, _ in items]
    return (
        len(items) == 8
        and all(GPU_UUID_RE.fullmatch(u) for u in uuids)
        and len(set(uuids)) == 8
        and sorted(i for _, i in items) == list(range(8))
    )


@HYPOTHESIS
@given(
    items=st.lists(
        st.tuples(
            st.one_of(st.text(max_size=100), st.from_regex(GPU_UUID_RE, fullmatch=True)),
            st.one_of(st.integers(min_value=0, max_value=8), INT32),
        ),
        max_size=12,
    )
)
async def test_register_node_any_gpu_list(world: World, items: list[tuple[str, int]]) -> None:
    """Any malformed GPU list is INVALID_ARGUMENT naming only 'gpus' or 'gpus[i].uuid', and registers nothing."""
    assume(not _valid_gpus(items))
    request = register_request(gpus=[node_pb2.Gpu(uuid=u, index=i) for u, i in items])
    error = await world.call("node", "RegisterNode", request)
    assert error is not None, error
    assert error.code == INVALID, error
    allowed = {"gpus"} | {f"gpus[{i}].uuid" for i in range(len(items))}
    assert error.field_violations, error.field_violations
    assert set(error.field_violations) <= allowed, error.field_violations
    assert await world.rows() == world.tables


# Bodies that are not a message at all --------------------------------------------------------

# Field 1 (a string in each request below) announced as five bytes that never come.
TRUNCATED = b"\x0a\x05"
# Field 1 holding two bytes that are not UTF-8, which a proto3 string refuses.
NOT_UTF8 = b"\x0a\x02\xff\xfe"
RAW_METHODS = (
    "/gpucloud.v1.TenantService/GetTenant",
    "/gpucloud.v1.TenantService/CreateTenant",
    "/gpucloud.v1.NodeService/RegisterNode",
    "/gpucloud.v1.AllocationService/CreateAllocation",
    "/google.longrunning.Operations/GetOperation",
)


@pytest.mark.parametrize("body", [TRUNCATED, NOT_UTF8], ids=["truncated", "not-utf8"])
@pytest.mark.parametrize("method", RAW_METHODS)
async def test_an_undecodable_body_is_invalid_argument_after_authentication(
    world: World, method: str, body: bytes
) -> None:
    """gRPC answers a body its deserializer refuses with UNKNOWN before any interceptor runs;
    the server must check the credential first, then say INVALID_ARGUMENT, and change nothing."""
    call = world.channel.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    with pytest.raises(grpc.aio.AioRpcError) as anonymous:
        await call(body, timeout=15)
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as operator:
        await call(body, metadata=world.metadata, timeout=15)
    error = from_rpc_error(operator.value)
    assert (error.code, error.reason) == (INVALID, "MALFORMED_REQUEST"), error
    assert await world.rows() == world.tables

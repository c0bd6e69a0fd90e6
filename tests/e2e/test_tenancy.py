"""Tenant isolation and authentication, end to end: other tenants' objects read as NOT_FOUND."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc
import pytest

from clients import (
    Allocation,
    AsyncClient,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from clients.errors import from_rpc_error
from gpucloud.v1 import allocation_pb2, allocation_pb2_grpc
from tests.conftest import RunningControlPlane, gpu_uuids, register_ready_nodes


@dataclass
class TwoTenants:
    """Tenants A and B with their clients; A holds one ACTIVE allocation."""

    a: AsyncClient
    b: AsyncClient
    a_token: str
    b_token: str
    allocation: Allocation


@pytest.fixture
async def tenants(control_plane: RunningControlPlane, operator: AsyncClient) -> AsyncIterator[TwoTenants]:
    await register_ready_nodes(operator, 4)
    a_token = (await operator.create_tenant("tenant-a")).token
    b_token = (await operator.create_tenant("tenant-b")).token
    async with control_plane.client(a_token) as a, control_plane.client(b_token) as b:
        allocation = await a.create_allocation(gpu_model="H100", node_count=2)
        yield TwoTenants(a, b, a_token, b_token, allocation)


async def test_other_tenant_cannot_get_allocation(tenants: TwoTenants) -> None:
    """GetAllocation of another tenant's allocation is NOT_FOUND."""
    with pytest.raises(NotFoundError):
        await tenants.b.get_allocation(tenants.allocation.allocation_id)
    assert (await tenants.a.get_allocation(tenants.allocation.allocation_id)).tenant_id == "tenant-a"


async def test_other_tenant_cannot_cancel_allocation(tenants: TwoTenants, operator: AsyncClient) -> None:
    """CancelAllocation of another tenant's allocation is NOT_FOUND and leaves it ACTIVE on its nodes."""
    with pytest.raises(NotFoundError):
        await tenants.b.cancel_allocation(tenants.allocation.allocation_id)
    after = await tenants.a.get_allocation(tenants.allocation.allocation_id)
    assert after.state == "ACTIVE"
    assert after.node_ids == tenants.allocation.node_ids
    for node_id in after.node_ids:
        node = await operator.get_node(node_id)
        assert (node.state, node.allocation_id) == ("ALLOCATED", after.allocation_id)
    assert len(await operator.list_operations()) == 0


async def test_other_tenant_list_never_shows_allocations(tenants: TwoTenants) -> None:
    """A tenant's list holds only its own allocations, and asking for another tenant's list gives an empty one."""
    own = await tenants.b.create_allocation(gpu_model="H100", node_count=1)
    listed = await tenants.b.list_allocations()
    assert [x.allocation_id for x in listed] == [own.allocation_id]
    other = await tenants.b.list_allocations(tenant_id="tenant-a")
    assert len(other) == 0
    assert other.next_page_token == ""
    # A tenant that does not exist reads the same: the answer does not tell which ids exist.
    assert len(await tenants.b.list_allocations(tenant_id="no-such-tenant")) == 0
    # A still sees its own allocation.
    assert [x.allocation_id for x in await tenants.a.list_allocations()] == [tenants.allocation.allocation_id]


async def test_other_tenant_cannot_read_operation(tenants: TwoTenants) -> None:
    """Another tenant's cancel Operation is NOT_FOUND for get and wait and absent from its list."""
    operation = await tenants.a.cancel_allocation(tenants.allocation.allocation_id)
    with pytest.raises(NotFoundError):
        await tenants.b.get_operation(operation.name)
    with pytest.raises(NotFoundError):
        await tenants.b.wait_operation(operation.name, timeout=1)
    assert len(await tenants.b.list_operations()) == 0
    assert (await tenants.a.get_operation(operation.name)).name == operation.name


async def test_missing_token_is_unauthenticated(control_plane: RunningControlPlane) -> None:
    """A call without authorization metadata is UNAUTHENTICATED."""
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        stub = allocation_pb2_grpc.AllocationServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListAllocations(allocation_pb2.ListAllocationsRequest(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert from_rpc_error(caught.value).reason == "MISSING_TOKEN"


@pytest.mark.parametrize(
    ("authorization", "shown"),
    [("Basic dXNlcjpwYXNz", "uses the 'Basic' scheme"), ("Bearer ", "is not of the form"), ("gpc_abc", "is not of")],
)
async def test_authorization_of_another_form_is_named_as_such(
    control_plane: RunningControlPlane, authorization: str, shown: str
) -> None:
    """Basic credentials or a Bearer with no token are not "no token": the error says what is
    wrong with the metadata that was sent, and never repeats the credential."""
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        stub = allocation_pb2_grpc.AllocationServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListAllocations(
                allocation_pb2.ListAllocationsRequest(), metadata=(("authorization", authorization),), timeout=10
            )
    error = from_rpc_error(caught.value)
    assert (caught.value.code(), error.reason) == (grpc.StatusCode.UNAUTHENTICATED, "MALFORMED_AUTHORIZATION")
    assert shown in error.message
    credential = authorization.split(" ", 1)[-1].strip()
    assert not credential or credential not in error.message


@pytest.mark.parametrize("kind", ["garbage", "unknown-id", "wrong-secret"])
async def test_invalid_token_is_unauthenticated(
    control_plane: RunningControlPlane, tenants: TwoTenants, kind: str
) -> None:
    """A garbage, unknown or wrong-secret bearer token is UNAUTHENTICATED."""
    token = {
        "garbage": "not-a-token",
        "unknown-id": "gpc_0000000000000000_" + "x" * 43,
        "wrong-secret": tenants.a_token[:-1] + ("x" if tenants.a_token[-1] != "x" else "y"),
    }[kind]
    async with control_plane.client(token) as client:
        with pytest.raises(UnauthenticatedError):
            await client.list_allocations()
        with pytest.raises(UnauthenticatedError):
            await client.get_allocation(tenants.allocation.allocation_id)


async def _list_nodes(client: AsyncClient) -> object:
    return await client.list_nodes()


async def _create_tenant(client: AsyncClient) -> object:
    return await client.create_tenant("sneaky")


async def _register_node(client: AsyncClient) -> object:
    return await client.register_node(
        "rogue-000", gpu_model="H100", gpu_uuids=gpu_uuids("rogue-000"), zone="zone-a", rack="rack-0", leaf_switch="l0"
    )


@pytest.mark.parametrize("call", [_list_nodes, _create_tenant, _register_node], ids=lambda f: f.__name__.strip("_"))
async def test_tenant_cannot_call_operator_methods(
    tenants: TwoTenants, operator: AsyncClient, call: Callable[[AsyncClient], Awaitable[object]]
) -> None:
    """A tenant token calling an operator method is PERMISSION_DENIED and changes nothing."""
    with pytest.raises(PermissionDeniedError):
        await call(tenants.a)
    assert [t.tenant_id for t in await operator.list_tenants()] == ["tenant-a", "tenant-b"]
    assert len(await operator.list_nodes()) == 4


async def test_tenant_cannot_allocate_for_another_tenant(tenants: TwoTenants, operator: AsyncClient) -> None:
    """A tenant creating an allocation with another tenant's id is PERMISSION_DENIED and places nothing."""
    with pytest.raises(PermissionDeniedError):
        await tenants.a.create_allocation(gpu_model="H100", node_count=1, tenant_id="tenant-b")
    assert len(await tenants.b.list_allocations()) == 0
    assert len(await operator.list_nodes(state="READY")) == 2

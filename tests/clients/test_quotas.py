"""Quotas through the client: an operator sets a tenant's quota of a GPU model and lists it with
the nodes the tenant holds, a tenant reads only its own and may not set one, a create over the
quota waits (or, asked not to wait, is refused with QUOTA_EXCEEDED), and an allocation
preempted so that a lender could reclaim its quota says why."""

from __future__ import annotations

import asyncio
from datetime import UTC

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from clients import (
    AsyncClient,
    Client,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    Quota,
    ResourceExhaustedError,
    convert,
)
from gpucloud.v1 import allocation_pb2, node_pb2
from tests.conftest import RunningControlPlane, register_ready_nodes, until

# Conversions ----------------------------------------------------------------------------------


def test_a_quota_reads_with_its_model_by_name_and_an_aware_update_time() -> None:
    message = allocation_pb2.Quota(
        tenant_id="acme",
        gpu_model=node_pb2.GPU_MODEL_H100,
        nodes=4,
        borrow_limit=2,
        cohort="lab",
        used_nodes=5,
        actor="operator:tok-1",
        update_time=Timestamp(seconds=1_764_600_000),
        used_gpu_milli=36_500,
    )
    read = convert.quota(message)
    when = message.update_time.ToDatetime(tzinfo=UTC)
    assert read == Quota("acme", "H100", 4, 2, "lab", 5, "operator:tok-1", when, used_gpu_milli=36_500)
    assert read.update_time is not None
    assert read.update_time.tzinfo is UTC


def test_an_empty_quota_message_reads_as_zeros_no_cohort_and_no_time() -> None:
    read = convert.quota(allocation_pb2.Quota())
    assert (read.gpu_model, read.nodes, read.borrow_limit, read.cohort, read.update_time) == (
        "UNSPECIFIED",
        0,
        0,
        "",
        None,
    )


def test_an_allocation_carries_why_it_was_preempted_and_reads_empty_otherwise() -> None:
    reason = "preempted: tenant beta reclaims 1 H100 node(s) of its quota"
    message = allocation_pb2.Allocation(state=allocation_pb2.ALLOCATION_STATE_CANCELLED, preempted_reason=reason)
    assert convert.allocation(message).preempted_reason == reason
    assert convert.created_allocation(allocation_pb2.Allocation(), replayed=False).preempted_reason == ""


def test_the_new_pending_reason_kinds_read_by_their_short_names() -> None:
    kinds = [
        allocation_pb2.PENDING_REASON_KIND_QUOTA_EXCEEDED,
        allocation_pb2.PENDING_REASON_KIND_WAITING_FOR_PREEMPTION,
    ]
    names = [convert.enum_name("PendingReasonKind", "PENDING_REASON_KIND_", k) for k in kinds]
    assert names == ["QUOTA_EXCEEDED", "WAITING_FOR_PREEMPTION"]


# Against a server -----------------------------------------------------------------------------


async def _tenant(operator: AsyncClient, tenant_id: str) -> str:
    """Create ``tenant_id``: its token."""
    return (await operator.create_tenant(tenant_id)).token


async def test_an_operator_sets_a_quota_and_lists_it_with_the_nodes_held(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 3)
    await _tenant(operator, "acme")
    await _tenant(operator, "beta")
    quota = await operator.set_quota("acme", "h100", 2, borrow_limit=1, cohort="lab")
    assert (quota.tenant_id, quota.gpu_model, quota.nodes, quota.borrow_limit, quota.cohort) == (
        "acme",
        "H100",
        2,
        1,
        "lab",
    )
    assert quota.used_nodes == 0
    assert quota.actor.startswith("operator:")
    assert quota.update_time is not None
    await operator.set_quota("beta", "H100", 1)
    # A tenant's ACTIVE allocations count; one PENDING or cancelled does not.
    await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    cancelled = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="beta")
    await operator.cancel_allocation(cancelled.allocation_id)
    listed = await operator.list_quotas()
    assert [(q.tenant_id, q.gpu_model, q.nodes, q.used_nodes, q.used_gpu_milli) for q in listed] == [
        ("acme", "H100", 2, 2, 16_000),
        ("beta", "H100", 1, 0, 0),
    ]
    assert [q.tenant_id for q in await operator.list_quotas(tenant_id="beta")] == ["beta"]


async def test_setting_a_quota_again_replaces_it(operator: AsyncClient) -> None:
    await _tenant(operator, "acme")
    await operator.set_quota("acme", "H100", 2, borrow_limit=1, cohort="lab")
    again = await operator.set_quota("acme", "H100", 5)
    assert (again.nodes, again.borrow_limit, again.cohort) == (5, 0, "")
    assert [(q.nodes, q.cohort) for q in await operator.list_quotas()] == [(5, "")]


async def test_a_tenant_reads_only_its_own_quotas_and_may_not_set_one(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    token = await _tenant(operator, "acme")
    await _tenant(operator, "beta")
    await operator.set_quota("acme", "H100", 2)
    await operator.set_quota("beta", "A100", 3)
    async with control_plane.client(token) as acme:
        assert [(q.tenant_id, q.gpu_model) for q in await acme.list_quotas()] == [("acme", "H100")]
        assert await acme.list_quotas(tenant_id="beta") == []
        with pytest.raises(PermissionDeniedError):
            await acme.set_quota("acme", "H100", 100)
    assert [q.nodes for q in await operator.list_quotas(tenant_id="acme")] == [2]


async def test_a_quota_for_an_unknown_tenant_is_not_found_and_bad_values_are_named(operator: AsyncClient) -> None:
    with pytest.raises(NotFoundError):
        await operator.set_quota("nobody", "H100", 1)
    await _tenant(operator, "acme")
    with pytest.raises(InvalidArgumentError) as caught:
        await operator.set_quota("acme", "H100", 100_001, borrow_limit=-1, cohort="Not A Cohort")
    assert set(caught.value.field_violations) == {"nodes", "borrow_limit", "cohort"}


async def test_a_create_over_quota_is_refused_when_asked_not_to_wait(operator: AsyncClient) -> None:
    await register_ready_nodes(operator, 3)
    await _tenant(operator, "acme")
    await operator.set_quota("acme", "H100", 1)
    await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    with pytest.raises(ResourceExhaustedError) as caught:
        await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme", fail_if_unavailable=True)
    assert caught.value.reason == "QUOTA_EXCEEDED"
    figures = {k: caught.value.metadata.get(k) for k in ("used", "limit", "nominal", "needed", "gpu_model")}
    assert figures == {"used": "1", "limit": "1", "nominal": "1", "needed": "1", "gpu_model": "H100"}
    assert len(await operator.list_allocations(tenant_id="acme")) == 1


async def test_a_create_over_quota_waits_saying_so_and_holds_up_no_other_tenant(operator: AsyncClient) -> None:
    await register_ready_nodes(operator, 3)
    await _tenant(operator, "acme")
    await _tenant(operator, "beta")
    await operator.set_quota("acme", "H100", 1)
    waiting = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    assert (waiting.state, waiting.node_ids) == ("PENDING", ())
    explained = await operator.explain_allocation(waiting.allocation_id)
    assert [r.kind for r in explained.reasons] == ["QUOTA_EXCEEDED"]
    assert explained.reasons[0].figures == {"used": 0, "limit": 1, "nominal": 1, "needed": 2}
    # beta has no quota: unlimited, and not held up by acme's wait. The create itself may answer
    # PENDING behind acme's allocation; the next scheduling cycle admits it all the same.
    other = await operator.create_allocation(gpu_model="H100", node_count=3, tenant_id="beta")
    assert (await operator.wait_admitted(other.allocation_id, timeout=10, poll_s=0.05)).state == "ACTIVE"
    assert (await operator.get_allocation(waiting.allocation_id)).state == "PENDING"


async def test_a_lender_reclaiming_its_quota_preempts_the_borrower_which_says_why(operator: AsyncClient) -> None:
    """Two nodes, two tenants of one cohort with one node each: acme borrows beta's unused node;
    beta's create of its one node preempts acme's allocation, which says why, and is admitted."""
    await register_ready_nodes(operator, 2)
    await _tenant(operator, "acme")
    await _tenant(operator, "beta")
    await operator.set_quota("acme", "H100", 1, borrow_limit=1, cohort="lab")
    await operator.set_quota("beta", "H100", 1, borrow_limit=1, cohort="lab")
    borrower = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    assert borrower.state == "ACTIVE"
    lender = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="beta")
    admitted = await operator.wait_admitted(lender.allocation_id, timeout=30, poll_s=0.05)
    assert admitted.state == "ACTIVE"
    preempted = await operator.get_allocation(borrower.allocation_id)
    assert preempted.state in ("CANCELLING", "CANCELLED")
    assert preempted.preempted_reason
    assert admitted.preempted_reason == ""


async def test_the_blocking_client_sets_and_lists_quotas_too(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await _tenant(operator, "acme")

    def blocking() -> list[Quota]:
        with Client(control_plane.address, control_plane.operator_token, timeout=15) as client:
            client.set_quota("acme", "A100", 4, borrow_limit=2, cohort="lab")
            return client.list_quotas(tenant_id="acme")

    [quota] = await asyncio.to_thread(blocking)
    assert (quota.gpu_model, quota.nodes, quota.borrow_limit, quota.cohort) == ("A100", 4, 2, "lab")


async def test_a_quota_raised_admits_what_waited_over_it(operator: AsyncClient) -> None:
    await register_ready_nodes(operator, 2)
    await _tenant(operator, "acme")
    await operator.set_quota("acme", "H100", 1)
    waiting = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    assert waiting.state == "PENDING"
    await operator.set_quota("acme", "H100", 2)

    async def admitted() -> bool:
        return (await operator.get_allocation(waiting.allocation_id)).state == "ACTIVE"

    await until(admitted)

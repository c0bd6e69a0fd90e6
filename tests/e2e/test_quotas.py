"""Quotas through the real server: a tenant over its quota waits without holding up others, a
tenant borrows what its cohort leaves unused, and one within its own quota reclaims it by
preempting the borrowers only, the victim told why."""

from __future__ import annotations

import asyncio

import pytest

from clients import AsyncClient, ResourceExhaustedError
from clients.models import Allocation
from tests.conftest import RunningControlPlane, register_ready_nodes, until


async def _state(client: AsyncClient, allocation_id: str) -> str:
    return (await client.get_allocation(allocation_id)).state


async def _active(client: AsyncClient, tenant_id: str, nodes: int) -> Allocation:
    created = await client.create_allocation(gpu_model="H100", node_count=nodes, tenant_id=tenant_id)
    admitted = await client.wait_admitted(created.allocation_id, timeout=15, poll_s=0.05)
    assert admitted.state == "ACTIVE", admitted
    return admitted


async def test_quota_borrowing_and_reclaim_preempt_only_borrowers(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Eight nodes. acme (4) and bolt (2, may borrow 4) share the cohort lab; carol (2) has
    none. carol's 3 waits over its quota with eight nodes free; bolt borrows two of acme's
    unused four; when acme asks for its four, bolt's borrowed allocation, and nothing else,
    is preempted, and acme is admitted once it is released."""
    await register_ready_nodes(operator, 8)
    for tenant in ("acme", "bolt", "carol"):
        await operator.create_tenant(tenant)
    await operator.set_quota("acme", "H100", 4, cohort="lab")
    await operator.set_quota("bolt", "H100", 2, borrow_limit=4, cohort="lab")
    await operator.set_quota("carol", "H100", 2)

    over = await operator.create_allocation(gpu_model="H100", node_count=3, tenant_id="carol")
    assert over.state == "PENDING"
    [reason] = (await operator.explain_allocation(over.allocation_id)).reasons
    assert reason.kind == "QUOTA_EXCEEDED"
    assert reason.figures == {"used": 0, "limit": 2, "nominal": 2, "needed": 3}
    with pytest.raises(ResourceExhaustedError) as refused:
        await operator.create_allocation(gpu_model="H100", node_count=3, tenant_id="carol", fail_if_unavailable=True)
    assert refused.value.reason == "QUOTA_EXCEEDED"

    # Over its quota, carol's waiting allocation holds up no one, not even a create that will not wait.
    carol = await operator.create_allocation(
        gpu_model="H100", node_count=2, tenant_id="carol", fail_if_unavailable=True
    )
    assert carol.state == "ACTIVE"
    bolt_own = await _active(operator, "bolt", 2)
    bolt_borrowed = await _active(operator, "bolt", 2)
    held = {q.tenant_id: q.used_nodes for q in await operator.list_quotas()}
    assert held == {"acme": 0, "bolt": 4, "carol": 2}
    assert await _state(operator, over.allocation_id) == "PENDING"

    reclaim = await operator.create_allocation(gpu_model="H100", node_count=4, tenant_id="acme")
    await until(lambda: _is(operator, reclaim.allocation_id, "ACTIVE"), timeout=15)
    preempted = await operator.get_allocation(bolt_borrowed.allocation_id)
    assert preempted.state in ("CANCELLING", "CANCELLED")
    assert "tenant acme reclaims its H100 quota" in preempted.preempted_reason
    assert "held 4" in preempted.preempted_reason
    for untouched in (bolt_own, carol):
        after = await operator.get_allocation(untouched.allocation_id)
        assert (after.state, after.preempted_reason) == ("ACTIVE", "")
    held = {q.tenant_id: q.used_nodes for q in await operator.list_quotas()}
    assert held == {"acme": 4, "bolt": 2, "carol": 2}


async def _is(client: AsyncClient, allocation_id: str, state: str) -> bool:
    return await _state(client, allocation_id) == state


async def test_concurrent_creates_never_exceed_a_quota(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Twelve racing one-node creates of a tenant whose quota is three, on ten free nodes:
    exactly three are placed and the rest refused for the quota, on either database."""
    await register_ready_nodes(operator, 10)
    await operator.create_tenant("acme")
    await operator.set_quota("acme", "H100", 3)
    clients = [control_plane.client() for _ in range(4)]
    try:
        results = await asyncio.gather(
            *(
                clients[i % len(clients)].create_allocation(
                    gpu_model="H100", node_count=1, tenant_id="acme", fail_if_unavailable=True
                )
                for i in range(12)
            ),
            return_exceptions=True,
        )
    finally:
        for client in clients:
            await client.close()
    placed = [r for r in results if isinstance(r, Allocation)]
    refused = [r for r in results if isinstance(r, ResourceExhaustedError)]
    assert (len(placed), len(refused)) == (3, 9), results
    assert {error.reason for error in refused} == {"QUOTA_EXCEEDED"}
    [quota] = await operator.list_quotas(tenant_id="acme")
    assert (quota.used_nodes, quota.used_gpu_milli) == (3, 24000)


async def test_part_node_work_counts_against_the_quota_by_its_gpus(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """A one-node quota is eight GPUs, however they are asked for: four 2-GPU allocations
    fit, a fifth waits for the quota (another tenant's work goes ahead of it), a whole node
    is refused, and the fifth is admitted once one of the four is cancelled."""
    await register_ready_nodes(operator, 3)
    for tenant in ("acme", "bolt"):
        await operator.create_tenant(tenant)
    await operator.set_quota("acme", "H100", 1)
    for _ in range(4):
        created = await operator.create_allocation(gpu_model="H100", gpus=2, tenant_id="acme")
        assert (await operator.wait_admitted(created.allocation_id, timeout=15, poll_s=0.05)).state == "ACTIVE"
    first = created
    fifth = await operator.create_allocation(gpu_model="H100", gpus=2, tenant_id="acme")
    assert fifth.state == "PENDING"
    [reason] = (await operator.explain_allocation(fifth.allocation_id)).reasons
    assert reason.kind == "QUOTA_EXCEEDED"
    gpu_figures = [reason.figures[f"{name}_gpu_milli"] for name in ("used", "limit", "needed")]
    assert (reason.figures["used"], gpu_figures) == (1, [8000, 8000, 2000])
    bolt = await operator.create_allocation(gpu_model="H100", gpus=1, tenant_id="bolt")
    assert (await operator.wait_admitted(bolt.allocation_id, timeout=15, poll_s=0.05)).state == "ACTIVE"
    with pytest.raises(ResourceExhaustedError) as refused:
        await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme", fail_if_unavailable=True)
    assert refused.value.reason == "QUOTA_EXCEEDED"
    # Eight GPUs held are a node's worth: said in nodes, as for whole-node work.
    assert (refused.value.metadata["used"], refused.value.metadata["limit"]) == ("1", "1")
    [quota] = await operator.list_quotas(tenant_id="acme")
    assert (quota.used_nodes, quota.used_gpu_milli) == (1, 8000)

    await operator.cancel_allocation(first.allocation_id)
    admitted = await operator.wait_admitted(fifth.allocation_id, timeout=15, poll_s=0.05)
    assert admitted.state == "ACTIVE"
    await operator.cancel_allocation(fifth.allocation_id)
    [quota] = await operator.list_quotas(tenant_id="acme")
    # Six GPUs are still a node's worth, rounded up; the GPUs say what is left of the quota.
    assert (quota.used_nodes, quota.used_gpu_milli) == (1, 6000)

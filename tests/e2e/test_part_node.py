"""Part-node allocations through the real server: whole GPUs, MIG slices and soft shares of one
node, packed onto shared nodes by the scheduling cycle, released after their scrub, counted by
the queue's rules, and billed by the fraction of a GPU they hold."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest

from accounting.periods import period_of
from clients import AsyncClient, InvalidArgumentError, ResourceExhaustedError
from clients.metrics import MetricsResult, NodeSamples, SeriesSamples
from clients.models import Allocation
from services.clock import now_us
from tests.conftest import RunningControlPlane, register_ready_nodes, running_control_plane
from tests.e2e.helpers import new_tenant


async def _admitted(client: AsyncClient, allocation_id: str) -> Allocation:
    """The allocation once the scheduling cycle admitted it."""
    admitted = await client.wait_admitted(allocation_id, timeout=15, poll_s=0.02)
    assert admitted.state == "ACTIVE"
    return admitted


async def _place(
    client: AsyncClient, tenant: str, *, gpus: int = 0, mig_profile: str = "", share_milli: int = 0
) -> Allocation:
    created = await client.create_allocation(
        gpu_model="H100", tenant_id=tenant, gpus=gpus, mig_profile=mig_profile, share_milli=share_milli
    )
    return await _admitted(client, created.allocation_id)


async def _release(client: AsyncClient, allocation_id: str) -> None:
    operation = await client.cancel_allocation(allocation_id)
    assert (await client.wait_operation(operation.name, timeout=30)).done


async def _node_states(client: AsyncClient) -> dict[str, str]:
    return {n.node_id: n.state for n in (await client.list_nodes(gpu_model="H100", page_size=100)).items}


async def test_gpus_pack_onto_a_shared_node_which_is_scrubbed_when_its_last_hold_ends(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    nodes = await register_ready_nodes(operator, 2)
    await operator.create_tenant("acme")
    first = await _place(operator, "acme", gpus=2)
    second = await _place(operator, "acme", gpus=4)
    assert first.node_ids == second.node_ids == (nodes[0],), "the second packed onto the shared node"
    assert [(h.gpu_index, h.milli) for h in first.gpu_holds] == [(0, 1000), (1, 1000)]
    assert [h.gpu_index for h in second.gpu_holds] == [2, 3, 4, 5]
    assert all(h.gpu_uuid.startswith("GPU-") for h in first.gpu_holds + second.gpu_holds)
    third = await _place(operator, "acme", gpus=4)
    assert third.node_ids == (nodes[1],), "two GPUs left on the shared node: a free node is opened"
    assert await _node_states(operator) == {nodes[0]: "ALLOCATED", nodes[1]: "ALLOCATED"}

    # A whole-node request finds no free node: the shared ones are not free.
    whole = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    assert whole.state == "PENDING"

    await _release(operator, first.allocation_id)
    assert (await _node_states(operator))[nodes[0]] == "ALLOCATED", "the second still holds GPUs there"
    await _release(operator, third.allocation_id)
    # Its node's last hold ended: scrubbed, back in the pool, and given to the waiting whole node.
    admitted = await _admitted(operator, whole.allocation_id)
    assert admitted.node_ids == (nodes[1],)
    released = await operator.get_allocation(third.allocation_id)
    assert released.state == "CANCELLED"
    assert [h.gpu_index for h in released.gpu_holds] == [0, 1, 2, 3], "the holds it had stay readable"


async def test_a_drained_shared_node_says_so_on_its_allocations_and_leaves_service_after_them(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    [node, other] = await register_ready_nodes(operator, 2)
    await operator.create_tenant("acme")
    first = await _place(operator, "acme", gpus=2)
    second = await _place(operator, "acme", share_milli=100)
    assert first.node_ids == second.node_ids == (node,)
    drained = await operator.drain_node(node, "fan failure")
    assert drained.state == "DRAINING"
    for allocation in (first, second):
        degraded = (await operator.get_allocation(allocation.allocation_id)).degraded_reason
        assert f"its node {node} is draining (fan failure)" in degraded
    # Nothing more goes onto it: the next part-node allocation opens the other node.
    third = await _place(operator, "acme", gpus=1)
    assert third.node_ids == (other,)
    await _release(operator, first.allocation_id)
    assert (await _node_states(operator))[node] == "DRAINING", "the share still holds a GPU there"
    await _release(operator, second.allocation_id)
    assert (await _node_states(operator))[node] == "QUARANTINED"
    assert (await operator.get_allocation(second.allocation_id)).degraded_reason == ""


async def test_fragmentation_counts_the_gpus_free_on_shared_nodes(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    nodes = await register_ready_nodes(operator, 3)
    await operator.create_tenant("acme")
    await _place(operator, "acme", gpus=2)
    await _place(operator, "acme", share_milli=300)
    [pool] = await operator.get_fragmentation()
    assert (pool.free_nodes, pool.shared_nodes, pool.free_gpus) == (2, 1, 2 * 8 + 5)
    by_node = {n.node_id: n for n in pool.node_capacity}
    assert (by_node[nodes[0]].shared, by_node[nodes[0]].free_gpus, by_node[nodes[0]].allocation_id) == (True, 5, None)
    assert (by_node[nodes[1]].shared, by_node[nodes[1]].free_gpus) == (False, 8)
    # Cordoned, the shared node takes no more placements: its free GPUs are no one's.
    await operator.cordon_node(nodes[0], "checking a fan")
    [pool] = await operator.get_fragmentation()
    assert (pool.shared_nodes, pool.free_gpus) == (1, 16)


async def test_a_16_gpu_whole_node_request_is_not_admitted_onto_7_7_8_free_gpus(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """One GPU held on each of two nodes, the third free: 22 GPUs are free, but only one whole
    node, so a two-node request waits with the figures of the fleet, while eight GPUs of one
    node are placed on the free one."""
    nodes = await register_ready_nodes(operator, 3)
    await operator.create_tenant("acme")
    # Fill two nodes with 1+4+2+1 GPUs each, then end all but each node's first.
    per_node = [[await _place(operator, "acme", gpus=g) for g in (1, 4, 2, 1)] for _ in range(2)]
    assert [{a.node_ids for a in fill} for fill in per_node] == [{(nodes[0],)}, {(nodes[1],)}]
    for fill in per_node:
        for allocation in fill[1:]:
            await _release(operator, allocation.allocation_id)
    assert await _node_states(operator) == {nodes[0]: "ALLOCATED", nodes[1]: "ALLOCATED", nodes[2]: "READY"}

    gang = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    assert gang.state == "PENDING"
    [reason] = (await operator.explain_allocation(gang.allocation_id)).reasons
    assert reason.kind == "WAITING_FOR_CAPACITY"
    assert reason.figures == {"free": 1, "spares": 0, "needed": 2}
    with pytest.raises(ResourceExhaustedError):
        await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme", fail_if_unavailable=True)
    # Eight GPUs on one node: none of the shared nodes has them, and the gang ahead holds the
    # one free node, so it waits behind the gang.
    eight = await operator.create_allocation(gpu_model="H100", gpus=8, tenant_id="acme")
    reasons = (await operator.explain_allocation(eight.allocation_id)).reasons
    assert [r.kind for r in reasons] == ["BEHIND_GANGS"]
    await operator.cancel_allocation(gang.allocation_id)
    assert (await _admitted(operator, eight.allocation_id)).node_ids == (nodes[2],)


async def test_a_part_node_request_that_fits_nowhere_explains_why_with_the_figures(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 1)
    await operator.create_tenant("acme")
    await _place(operator, "acme", gpus=4)
    await _place(operator, "acme", gpus=2)
    waiting = await operator.create_allocation(gpu_model="H100", gpus=4, tenant_id="acme")
    reasons = (await operator.explain_allocation(waiting.allocation_id)).reasons
    [reason] = reasons
    assert reason.kind == "WAITING_FOR_CAPACITY"
    assert reason.figures == {
        "free_gpus": 2,
        "shared_nodes": 1,
        "most_free_on_one": 2,
        "needed_gpus": 4,
        "free": 0,
        "spares": 0,
    }
    assert (await operator.get_allocation(waiting.allocation_id)).queue_position == 1
    with pytest.raises(ResourceExhaustedError) as refused:
        await operator.create_allocation(gpu_model="H100", gpus=4, tenant_id="acme", fail_if_unavailable=True)
    assert "2 GPU(s) free over 1 shared H100 node(s), at most 2 on one" in str(refused.value)
    # Two GPUs still fit beside the others, but not ahead of the waiting four: queue order.
    behind = await operator.create_allocation(gpu_model="H100", gpus=2, tenant_id="acme")
    assert [r.kind for r in (await operator.explain_allocation(behind.allocation_id)).reasons] == ["BEHIND_GANGS"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"gpus": 3}, "gpus"),
        ({"gpus": 2, "share_milli": 100}, "share_milli"),
        ({"mig_profile": "5g.60gb"}, "mig_profile"),
        ({"share_milli": 1000}, "share_milli"),
        ({"gpus": 1, "node_count": 1}, "node_count"),
        ({"gpus": 1, "cpu_milli": 500_000}, "cpu_milli"),
    ],
)
async def test_a_bad_part_node_request_names_its_field(
    control_plane: RunningControlPlane, operator: AsyncClient, fields: dict[str, int | str], field: str
) -> None:
    await operator.create_tenant("acme")
    gpus, share, count, cpu = (int(fields.get(k, 0)) for k in ("gpus", "share_milli", "node_count", "cpu_milli"))
    with pytest.raises(InvalidArgumentError) as refused:
        await operator.create_allocation(
            gpu_model="H100",
            tenant_id="acme",
            node_count=count,
            gpus=gpus,
            share_milli=share,
            mig_profile=str(fields.get("mig_profile", "")),
            cpu_milli=cpu,
        )
    assert field in refused.value.field_violations


async def test_a_tenant_reads_the_metrics_of_the_gpus_it_holds_and_no_others(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Two tenants on one shared node: each reads its own GPUs' series, neither the other's
    GPUs nor the node's own series; the operator reads them all."""
    node, acme, bolt = await _one_node_two_tenants(control_plane, operator)
    async with acme, bolt:
        mine = await _place(acme, "", gpus=2)
        theirs = await _place(bolt, "", share_milli=500)
        assert mine.node_ids == theirs.node_ids == (node,)
        other = next(g for g in range(8) if g not in {0, 1, theirs.gpu_holds[0].gpu_index})
        now = _now_ms()
        per_gpu = NodeSamples(node, now, {g: {"power_w": 100.0 + g} for g in range(8)})
        node_wide = SeriesSamples({"node": node, "field": "cpu_util"}, [now], [50.0])
        assert (await operator.write_samples([per_gpu], [node_wide])).samples_written == 9
        start, end = now - 60_000, now + 1_000

        def gpus(result: MetricsResult) -> set[str]:
            return {series.gpu for series in result.series}

        assert gpus(await acme.query_metrics(start=start, end=end)) == {"0", "1"}
        assert gpus(await bolt.query_metrics(start=start, end=end)) == {str(theirs.gpu_holds[0].gpu_index)}
        asked = await acme.query_metrics(start=start, end=end, node_ids=[node], gpu_indexes=[1, other])
        assert gpus(asked) == {"1"}
        assert (await acme.query_metrics(start=start, end=end, gpu_indexes=[other])).series == []
        stepped = await acme.query_metrics_range(start=start, end=end, step=61_000, aggregation="avg")
        assert gpus(stepped) == {"0", "1"}
        assert gpus(await operator.query_metrics(start=start, end=end)) == {*map(str, range(8)), ""}


async def test_a_gpu_another_tenant_held_before_shows_none_of_its_time(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """bolt holds GPU 0, acme GPU 1; a sample lands on both; bolt leaves and acme then gets GPU
    0 too: acme reads its GPU 1's sample, and nothing of GPU 0 from bolt's time."""
    node, acme, bolt = await _one_node_two_tenants(control_plane, operator)
    async with acme, bolt:
        theirs = await _place(bolt, "", gpus=1)
        mine = await _place(acme, "", gpus=1)
        assert [h.gpu_index for h in theirs.gpu_holds + mine.gpu_holds] == [0, 1]
        before = _now_ms()
        await operator.write_samples([NodeSamples(node, before, {0: {"power_w": 666.0}, 1: {"power_w": 1.0}})])
        await _release(bolt, theirs.allocation_id)
        later = await _place(acme, "", gpus=1)
        assert [h.gpu_index for h in later.gpu_holds] == [0]
        read = await acme.query_metrics(start=before - 1_000, end=_now_ms() + 1_000)
        assert {(s.gpu, tuple(s.values.tolist())) for s in read.series} == {("1", (1.0,))}


async def _one_node_two_tenants(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> tuple[str, AsyncClient, AsyncClient]:
    """One READY node, and clients of the tenants acme and bolt (not entered yet)."""
    [node] = await register_ready_nodes(operator, 1)
    return node, await new_tenant(operator, control_plane, "acme"), await new_tenant(operator, control_plane, "bolt")


def _now_ms() -> int:
    return now_us() // 1000


RATES = {"currency": "EUR", "gpu_hour": {"H100": {"on_demand": "4.00"}}}


@pytest.fixture
async def rated_operator(tmp_path: Path, database_url: str) -> AsyncIterator[AsyncClient]:
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps(RATES))
    async with (
        running_control_plane(tmp_path / "data", database_url, rates_path=rates) as running,
        running.client() as client,
    ):
        yield client


async def test_an_invoice_bills_a_mig_slice_and_a_soft_share_by_their_fraction(
    rated_operator: AsyncClient,
) -> None:
    operator = rated_operator
    await register_ready_nodes(operator, 1)
    await operator.create_tenant("acme")
    await operator.create_tenant("bolt")
    sliced = await _place(operator, "acme", mig_profile="3g.40gb")
    shared = await _place(operator, "acme", share_milli=250)
    whole = await _place(operator, "bolt", gpus=1)
    [slice_hold] = sliced.gpu_holds
    [share_hold] = shared.gpu_holds
    # First fit, the default policy, takes a profile's first free start.
    assert (slice_hold.milli, slice_hold.mig_start) == (500, 0)
    assert share_hold.milli == 250
    assert slice_hold.gpu_index != share_hold.gpu_index, "a GPU in MIG mode takes no soft shares"
    assert whole.node_ids == sliced.node_ids == shared.node_ids, "tenants share the node, not its GPUs"
    for allocation in (sliced, shared, whole):
        await _release(operator, allocation.allocation_id)

    invoice = await operator.get_invoice(period_of(now_us()).name, tenant_id="acme")
    lines = {line.gpu_milli: line for line in invoice.lines}
    assert set(lines) == {500, 250}
    for milli, line in lines.items():
        assert line.gpu_model == f"H100/{milli}"
        assert line.gpu_hour_rate == Decimal("4.00") * milli / 1000
        assert line.amount == (line.gpu_seconds * line.gpu_hour_rate / 3600).quantize(Decimal("0.01"))
    events = (await operator.list_usage_events(tenant_id="acme")).items
    units = {e.gpu_uuid for e in events}
    assert units == {f"{slice_hold.gpu_uuid}/{sliced.allocation_id}", f"{share_hold.gpu_uuid}/{shared.allocation_id}"}
    bolt = await operator.get_invoice(period_of(now_us()).name, tenant_id="bolt")
    assert [line.gpu_milli for line in bolt.lines] == [1000]

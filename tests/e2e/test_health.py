"""The health controller against the real server and simulated agents: a GPU that falls off the
bus takes its node out of service with the evidence in its events, and so does correctable ECC
rising report after report; an application's XID only tells the tenant; a pool losing many
nodes at once keeps all but its hourly limit in service; a node under an allocation is replaced
by a spare, one that creates left free when the operator reserved spares, or once a node frees
up when none was free; a GPU slow against the fleet median, sweep after sweep, drains its node."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clients import (
    Allocation,
    AsyncClient,
    InvalidArgumentError,
    PermissionDeniedError,
    ResourceExhaustedError,
)
from clients.agent.control import Fault
from clients.agent.fleet import SimulatedFleet
from services.health.config import HealthConfig
from services.health.controller import NodeHealth
from services.store.tx import Sql, Tx
from tests.clients.cli.test_commands import document
from tests.clients.cli.test_connection import gpucloud
from tests.conftest import RunningControlPlane, running_control_plane, until
from tests.e2e.agent_wire import FAST

# The slow-GPU sweep looks at the last second, and only when a test runs it (interval: an hour).
HEALTH = HealthConfig(
    removals_per_hour=2,
    removal_share_per_hour=0.10,
    resync_s=0.3,
    held_retry_s=0.3,
    slow_gpu_interval_s=3600.0,
    slow_gpu_window_s=1.0,
)


async def states(operator: AsyncClient) -> dict[str, str]:
    return {node.node_id: node.state for node in (await operator.list_nodes(page_size=1000)).items}


@asynccontextmanager
async def ready_fleet(
    tmp_path: Path, database_url: str, nodes: int, health: HealthConfig = HEALTH
) -> AsyncIterator[tuple[RunningControlPlane, SimulatedFleet, AsyncClient]]:
    """A control plane with the health limits above (or ``health``), ``nodes`` simulated agents
    with every node READY, and an operator's client."""
    async with running_control_plane(tmp_path / "data", database_url, fleet=FAST, health=health) as plane:
        fleet = SimulatedFleet(plane.address, nodes, interval_s=0.3, seed=3, burn_in_seconds=0.05, scrub_seconds=0.05)
        await fleet.mint_tokens(plane.operator_token)
        running = asyncio.create_task(fleet.run())
        try:
            async with plane.client() as operator:

                async def all_ready() -> bool:
                    now = await states(operator)
                    return len(now) == nodes and set(now.values()) == {"READY"}

                await until(all_ready, timeout=30)
                yield plane, fleet, operator
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)


async def test_a_gpu_off_the_bus_quarantines_its_node_and_an_application_xid_only_tells(
    tmp_path: Path, database_url: str
) -> None:
    async with ready_fleet(tmp_path, database_url, 10) as (plane, fleet, operator):
        fleet.inject("sim-0003", Fault.XID, gpu=2, code=79)
        fleet.inject("sim-0004", Fault.XID, gpu=5, code=13)
        fleet.inject("sim-0006", Fault.ECC, gpu=1, per_sample=5)

        async def quarantined() -> bool:
            return (await operator.get_node("sim-0003")).state == "QUARANTINED"

        await until(quarantined, timeout=30)
        [drain] = [e for e in (await operator.list_node_events("sim-0003")).items if e.event == "DRAIN"]
        assert drain.actor == "control-plane"
        assert drain.from_state == "READY"
        assert drain.to_state == "QUARANTINED"
        assert drain.reason.startswith("REPAIR: xid:79 on GPU 2, 1 in 1 h")
        assert "fell off the bus" in drain.reason

        async def told() -> bool:
            events = (await operator.list_node_events("sim-0004")).items
            return any(e.event == "HEALTH" for e in events)

        await until(told, timeout=30)
        [notice] = [e for e in (await operator.list_node_events("sim-0004")).items if e.event == "HEALTH"]
        assert notice.reason.startswith("NOTIFY_TENANT: xid:13 on GPU 5")
        assert (await operator.get_node("sim-0004")).state == "READY"
        # Decided once: another pass over the same strikes adds nothing.
        await another_pass(plane, "sim-0004")
        events = (await operator.list_node_events("sim-0004")).items
        assert [e.event for e in events].count("HEALTH") == 1

        # Correctable ECC counts as a strike each time it has risen since the status before;
        # three in a day drain the node.
        async def drained() -> bool:
            return (await operator.get_node("sim-0006")).state == "QUARANTINED"

        await until(drained, timeout=30)
        assert set(await strikes(plane, "sim-0006")) == {(1, "ecc_correctable_rising")}
        [drain] = [e for e in (await operator.list_node_events("sim-0006")).items if e.event == "DRAIN"]
        assert drain.reason.startswith("DRAIN_AFTER_JOB: ecc_correctable_rising on GPU 1, 3 in 24 h")
        others = await states(operator)
        assert sorted(n for n, state in others.items() if state != "READY") == ["sim-0003", "sim-0006"]

        # Fleet-wide, the same decisions in the order they were made, a page at a time.
        decided = (await operator.list_health_events(page_size=1000)).items
        assert sorted((e.node_id, e.event) for e in decided) == [
            ("sim-0003", "DRAIN"),
            ("sim-0004", "HEALTH"),
            ("sim-0006", "DRAIN"),
        ]
        times = [e.time for e in decided if e.time is not None]
        assert times == sorted(times)
        assert len(times) == len(decided)
        walked, token = [], ""
        while True:
            page = await operator.list_health_events(page_size=1, page_token=token)
            walked += page.items
            if not (token := page.next_page_token):
                break
        assert walked == decided
        last = decided[-1].time
        assert last is not None
        assert (await operator.list_health_events(since=last)).items == decided[-1:]
        assert (await operator.list_health_events(since=last + timedelta(seconds=1))).items == []


async def another_pass(plane: RunningControlPlane, node_id: str) -> None:
    """One more pass of the health controller's rules over ``node_id``, now."""
    store = plane.plane.database
    assert store is not None
    await NodeHealth(store, HEALTH).reconcile(node_id)


async def strikes(plane: RunningControlPlane, node_id: str) -> list[tuple[int, str]]:
    """The strikes stored for ``node_id``: (GPU index, or -1 for the node as a whole; signal)."""

    def read() -> Tx[list[tuple[int, str]]]:
        found = yield Sql("SELECT gpu_index, signal FROM health_observations WHERE node_id = :id", {"id": node_id})
        return [(-1 if gpu is None else int(gpu), str(signal)) for gpu, signal in found.rows]

    store = plane.plane.database
    assert store is not None
    return await store.query(read())


async def test_a_pool_failing_at_once_loses_only_its_hourly_limit(tmp_path: Path, database_url: str) -> None:
    """Ten nodes, a limit of max(2, 10%) = 2 an hour: five GPUs off the bus at once take two
    nodes out of service; the other three stay READY with the removal held, and say why."""
    failing = [f"sim-000{i}" for i in range(5)]
    async with ready_fleet(tmp_path, database_url, 10) as (plane, fleet, operator):
        for node_id in failing:
            fleet.inject(node_id, Fault.XID, gpu=0, code=79)

        async def decided() -> bool:
            held = 0
            for node_id in failing:
                events = (await operator.list_node_events(node_id)).items
                held += any(e.event == "HEALTH_HELD" for e in events)
            return held == 3

        await until(decided, timeout=30)
        for node_id in failing:
            await another_pass(plane, node_id)  # removes nothing more
        now = await states(operator)
        assert sorted(now[n] for n in failing) == ["QUARANTINED"] * 2 + ["READY"] * 3
        assert [n for n, state in now.items() if n not in failing and state != "READY"] == []
        for node_id in (n for n in failing if now[n] == "READY"):
            events = (await operator.list_node_events(node_id)).items
            [held] = [e for e in events if e.event == "HEALTH_HELD"]
            assert held.reason.startswith("held: REPAIR: xid:79 on GPU 0")
            assert "2 of the H100 pool removed in the last hour, limit 2" in held.reason


async def test_many_nodes_under_one_leaf_switch_failing_at_once_lose_only_its_limit(
    tmp_path: Path, database_url: str
) -> None:
    """A pool limit far above the failures, a leaf-switch limit of 2: the simulated fleet's first
    64 nodes share leaf switch sim-leaf-00, so two of five failing there leave service."""
    lenient_pool = dataclasses.replace(HEALTH, removals_per_hour=100, removals_per_leaf_hour=2)
    failing = [f"sim-000{i}" for i in range(5)]
    async with ready_fleet(tmp_path, database_url, 8, lenient_pool) as (_, fleet, operator):
        for node_id in failing:
            fleet.inject(node_id, Fault.XID, gpu=0, code=79)

        async def decided() -> bool:
            held = 0
            for node_id in failing:
                held += any(e.event == "HEALTH_HELD" for e in (await operator.list_node_events(node_id)).items)
            return held == 3

        await until(decided, timeout=30)
        now = await states(operator)
        assert sorted(now[n] for n in failing) == ["QUARANTINED"] * 2 + ["READY"] * 3
        for node_id in (n for n in failing if now[n] == "READY"):
            [held] = [e for e in (await operator.list_node_events(node_id)).items if e.event == "HEALTH_HELD"]
            assert "2 under leaf switch sim-leaf-00 removed in the last hour, limit 2" in held.reason


async def test_a_node_going_silent_three_times_is_drained_though_it_comes_back(
    tmp_path: Path, database_url: str
) -> None:
    async with ready_fleet(tmp_path, database_url, 4) as (plane, fleet, operator):
        for outage in range(1, 4):
            fleet.inject("sim-0001", Fault.LOST_HEARTBEAT, seconds=2.0)

            async def marked(times: int = outage) -> bool:
                events = (await operator.list_node_events("sim-0001")).items
                return [e.event for e in events].count("UNREACHABLE") == times

            await until(marked, timeout=30)
            if outage < 3:
                assert (await operator.get_node("sim-0001")).state == "READY"

                async def back() -> bool:
                    return not (await operator.get_node("sim-0001")).unreachable

                await until(back, timeout=30)

        async def drained() -> bool:
            return (await operator.get_node("sim-0001")).state == "QUARANTINED"

        await until(drained, timeout=30)
        [drain] = [e for e in (await operator.list_node_events("sim-0001")).items if e.event == "DRAIN"]
        assert drain.reason.startswith("DRAIN_AFTER_JOB: missed_heartbeats on the node, 3 in 1 h")
        assert await strikes(plane, "sim-0001") == [(-1, "missed_heartbeats")] * 3


async def test_a_paused_pool_keeps_its_nodes_until_resumed(tmp_path: Path, database_url: str) -> None:
    async with ready_fleet(tmp_path, database_url, 4) as (_, fleet, operator):
        assert [(p.gpu_model, p.paused, p.updated) for p in await operator.get_health_automation()] == [
            ("A100", False, None),
            ("H100", False, None),
            ("H200", False, None),
            ("B200", False, None),
            ("L40S", False, None),
        ]
        paused = await operator.set_health_automation("H100", paused=True, reason="exporter upgrade")
        assert (paused.paused, paused.reason) == (True, "exporter upgrade")
        assert paused.actor.startswith("operator:")
        # Setting it again changes nothing, not even its time.
        assert await operator.set_health_automation("H100", paused=True, reason="exporter upgrade") == paused
        fleet.inject("sim-0002", Fault.XID, gpu=4, code=79)

        async def held() -> bool:
            events = (await operator.list_node_events("sim-0002")).items
            return any(e.event == "HEALTH_HELD" for e in events)

        await until(held, timeout=30)
        [event] = [e for e in (await operator.list_node_events("sim-0002")).items if e.event == "HEALTH_HELD"]
        assert event.reason.startswith("held: REPAIR: xid:79 on GPU 4")
        assert event.reason.endswith(f"automation of the H100 pool paused by {paused.actor}: exporter upgrade")
        assert (await operator.get_node("sim-0002")).state == "READY"

        resumed = await operator.set_health_automation("H100", paused=False)
        assert not resumed.paused
        assert [p.paused for p in await operator.get_health_automation() if p.gpu_model == "H100"] == [False]

        async def drained() -> bool:
            return (await operator.get_node("sim-0002")).state == "QUARANTINED"

        await until(drained, timeout=30)


def fault_time(fleet: SimulatedFleet, node_id: str, *, gpu: int, code: int) -> datetime:
    """Raise XID ``code`` on the node's GPU now; when the driver raised it, to the millisecond,
    as the simulated GPUs time it."""
    raised = fleet.nodes[node_id].gpus.inject_xid(gpu, code)
    return datetime.fromtimestamp(raised.timestamp_ms / 1000, UTC)


async def once_replaced(operator: AsyncClient, allocation_id: str) -> Allocation:
    """The allocation once the health controller has replaced a node of it."""

    async def replaced() -> bool:
        return bool((await operator.get_allocation(allocation_id)).replacements)

    await until(replaced, timeout=30)
    return await operator.get_allocation(allocation_id)


async def test_a_node_off_the_bus_under_an_allocation_is_replaced_by_a_spare(tmp_path: Path, database_url: str) -> None:
    async with ready_fleet(tmp_path, database_url, 4) as (_, fleet, operator):
        await operator.create_tenant("acme")
        before = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
        kept, faulty = before.node_ids
        raised = fault_time(fleet, faulty, gpu=2, code=79)
        after = await once_replaced(operator, before.allocation_id)
        [made] = after.replacements
        assert made.removed_node_id == faulty
        assert made.spare_node_id is not None
        assert made.spare_node_id not in before.node_ids
        # The spare takes the faulty node's place in the allocation's order.
        assert after.node_ids == (kept, made.spare_node_id)
        assert made.reason.startswith("REPAIR: xid:79 on GPU 2, 1 in 1 h")
        assert after.degraded_reason == ""
        assert after.state == "ACTIVE"

        # The faulty node is scrubbed and leaves service, never READY; the spare is the tenant's.
        async def out_of_service() -> bool:
            return (await operator.get_node(faulty)).state == "QUARANTINED"

        await until(out_of_service, timeout=30)
        moves = [(e.event, e.from_state, e.to_state) for e in (await operator.list_node_events(faulty)).items]
        assert moves[-3:-1] == [("DRAIN", "ALLOCATED", "DRAINING"), ("RELEASE", "DRAINING", "SCRUBBING")]
        assert moves[-1][2] == "QUARANTINED"
        spare = await operator.get_node(made.spare_node_id)
        assert spare.state == "ALLOCATED"
        [allocate] = [e for e in (await operator.list_node_events(made.spare_node_id)).items if e.event == "ALLOCATE"]
        assert allocate.reason == f"{before.allocation_id}: spare for {faulty}"

        # Billing: the faulty node's GPUs stop when the fault was raised, the spare's start at
        # the replacement; the kept node's GPUs run on.
        usage = (await operator.list_usage_events(tenant_id="acme", page_size=1000)).items
        by_node: dict[str, list[tuple[str, object]]] = {}
        for event in usage:
            by_node.setdefault(event.node_id, []).append((event.kind, event.event_time))
        assert sorted(by_node) == sorted([kept, faulty, made.spare_node_id])
        assert sorted(by_node[kept]) == [("START", before.admit_time)] * 8
        assert sorted(by_node[faulty]) == [("START", before.admit_time)] * 8 + [("STOP", raised)] * 8
        assert made.time is not None
        assert made.spare_time is not None
        assert raised < made.time <= made.spare_time  # the spare is billed from when it was held
        assert by_node[made.spare_node_id] == [("START", made.spare_time)] * 8


async def test_creates_leave_the_pools_spares_and_a_replacement_takes_one(tmp_path: Path, database_url: str) -> None:
    async with ready_fleet(tmp_path, database_url, 4) as (plane, fleet, operator):
        tenant = await operator.create_tenant("acme")
        assert [(p.gpu_model, p.spares, p.updated) for p in await operator.list_spare_pools()][:2] == [
            ("A100", 0, None),
            ("H100", 0, None),
        ]
        pool = await operator.set_spare_pool("H100", 1)
        assert (pool.gpu_model, pool.spares, pool.free_nodes) == ("H100", 1, 4)
        assert pool.actor.startswith("operator:")
        # Setting it again changes nothing, not even its time.
        assert await operator.set_spare_pool("H100", 1) == pool

        # Four nodes are free, one of them is the pool's spare: a create of four is refused.
        with pytest.raises(ResourceExhaustedError) as refused:
            await operator.create_allocation(gpu_model="H100", node_count=4, tenant_id="acme", fail_if_unavailable=True)
        assert "the fleet has 4 H100 node(s) in any state, 1 of them held back as spares" in str(refused.value)
        assert (refused.value.metadata["fleet"], refused.value.metadata["spares"]) == ("4", "1")
        before = await operator.create_allocation(gpu_model="H100", node_count=3, tenant_id="acme")
        with pytest.raises(ResourceExhaustedError):
            await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme", fail_if_unavailable=True)
        [h100] = [p for p in await operator.list_spare_pools() if p.gpu_model == "H100"]
        assert (h100.spares, h100.free_nodes) == (1, 1)
        [spare] = {f"sim-{i:04d}" for i in range(4)} - set(before.node_ids)

        # The spare is there for the health controller: a node off the bus is replaced by it.
        faulty = before.node_ids[1]
        fault_time(fleet, faulty, gpu=5, code=79)
        after = await once_replaced(operator, before.allocation_id)
        assert after.node_ids == (before.node_ids[0], spare, before.node_ids[2])
        assert after.degraded_reason == ""

        # Operators only; a count out of range names its field.
        async with plane.client(tenant.token) as acme:
            with pytest.raises(PermissionDeniedError):
                await acme.set_spare_pool("H100", 2)
        with pytest.raises(InvalidArgumentError) as bad:
            await operator.set_spare_pool("H100", -1)
        assert list(bad.value.field_violations) == ["spares"]

        # The same, as an operator reads and sets it on the command line.
        connect = ["--addr", plane.address, "--token", plane.operator_token]
        code, output = await asyncio.to_thread(gpucloud, *connect, "health", "spares", "H100", "2", "--json")
        assert code == 0, output
        assert (document(output)["spares"], document(output)["free_nodes"]) == (2, 0)
        code, output = await asyncio.to_thread(gpucloud, *connect, "health", "spares")
        assert code == 0, output
        cells = [line.replace("│", " ").split() for line in output.splitlines()]
        assert [row[:3] for row in cells if row[:1] == ["H100"]] == [["H100", "2", "0"]], output
        code, output = await asyncio.to_thread(gpucloud, *connect, "health", "spares", "H100")
        assert code == 2, output


async def test_with_no_spare_free_the_allocation_says_it_is_degraded(tmp_path: Path, database_url: str) -> None:
    async with ready_fleet(tmp_path, database_url, 3) as (_, fleet, operator):
        await operator.create_tenant("acme")
        before = await operator.create_allocation(gpu_model="H100", node_count=3, tenant_id="acme")
        faulty = before.node_ids[0]
        raised = fault_time(fleet, faulty, gpu=0, code=79)
        after = await once_replaced(operator, before.allocation_id)
        [made] = after.replacements
        assert (made.removed_node_id, made.spare_node_id) == (faulty, None)
        assert after.node_ids == before.node_ids[1:]
        assert after.degraded_reason.startswith("degraded: 1 of 3 node(s) missing;")
        assert f"{faulty} removed by the health controller and no spare H100 node free yet" in after.degraded_reason

        # Cancelled, it releases the nodes it still holds; the faulty one is not among them.
        operation = await operator.cancel_allocation(before.allocation_id)
        done = await operator.wait_operation(operation.name, timeout=30)
        assert done.nodes_total == 2
        cancelled = await operator.get_allocation(before.allocation_id)
        assert cancelled.state == "CANCELLED"
        assert cancelled.degraded_reason == ""
        usage = (await operator.list_usage_events(tenant_id="acme", page_size=1000)).items
        stops = sorted((e.node_id, e.event_time) for e in usage if e.kind == "STOP")
        assert stops == sorted(
            [(faulty, raised)] * 8 + [(node, cancelled.cancel_time) for node in before.node_ids[1:]] * 8
        )


async def test_a_degraded_allocation_gets_a_spare_once_a_node_frees_up(tmp_path: Path, database_url: str) -> None:
    async with ready_fleet(tmp_path, database_url, 4) as (_, fleet, operator):
        await operator.create_tenant("acme")
        short = await operator.create_allocation(gpu_model="H100", node_count=3, tenant_id="acme")
        other = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
        [freed] = other.node_ids
        faulty = short.node_ids[1]
        fault_time(fleet, faulty, gpu=3, code=79)
        degraded = await once_replaced(operator, short.allocation_id)
        assert degraded.degraded_reason.startswith("degraded: 1 of 3 node(s) missing;")
        [waiting] = degraded.replacements
        assert (waiting.spare_node_id, waiting.spare_time) == (None, None)

        # The other allocation's node is scrubbed and freed; the sweep gives it to the short one,
        # in the faulty node's place, billed from then.
        await operator.cancel_allocation(other.allocation_id)

        async def topped_up() -> bool:
            return (await operator.get_allocation(short.allocation_id)).degraded_reason == ""

        await until(topped_up, timeout=30)
        after = await operator.get_allocation(short.allocation_id)
        assert after.node_ids == (short.node_ids[0], freed, short.node_ids[2])
        [made] = after.replacements
        assert (made.removed_node_id, made.spare_node_id, made.time) == (faulty, freed, waiting.time)
        assert made.spare_time is not None
        assert waiting.time is not None
        assert made.spare_time > waiting.time
        usage = (await operator.list_usage_events(tenant_id="acme", page_size=1000)).items
        starts = [
            (e.node_id, e.event_time) for e in usage if e.kind == "START" and e.allocation_id == short.allocation_id
        ]
        assert sorted(starts) == sorted(
            [(node, short.admit_time) for node in short.node_ids] * 8 + [(freed, made.spare_time)] * 8
        )
        [allocate] = [e for e in (await operator.list_node_events(freed)).items if e.event == "ALLOCATE"][-1:]
        assert allocate.reason == f"{short.allocation_id}: spare for {faulty}"


async def test_a_slow_gpu_is_a_fleet_median_outlier_and_sweep_after_sweep_drains_its_node(
    tmp_path: Path, database_url: str
) -> None:
    async with ready_fleet(tmp_path, database_url, 10) as (plane, fleet, operator):
        # Every GPU busy: the sweep strikes only GPUs slow against busy peers.
        for node in fleet.nodes.values():
            for index in range(8):
                node.gpus.set_load(index, 0.9)
        fleet.inject("sim-0005", Fault.SLOW, gpu=6, factor=0.7)
        since_ms = int(time.time() * 1000) + 1
        until_ms = since_ms + 3_600_000

        async def flagged() -> bool:
            """Over the last second, as the sweep looks (HEALTH.slow_gpu_window_s), which began
            after the load was set (a push delayed under load still brings idle samples from
            before it): all 80 GPUs judged busy, and the slow GPU stands out."""
            now_ms = int(time.time() * 1000)
            if now_ms - 1000 <= since_ms:
                return False
            found = await operator.list_metric_outliers(field="sm_clock_mhz", start=now_ms - 1000, end=now_ms)
            busy = [(g.busy, g.gpus) for g in found.groups] == [(True, 80)]
            return busy and [(o.node_id, o.gpu_index) for o in found.outliers] == [("sim-0005", 6)]

        await until(flagged, timeout=30)
        found = await operator.list_metric_outliers(field="sm_clock_mhz", start=since_ms, end=until_ms, k=4)
        # Busy GPUs are compared with busy ones: all 80 of them, their clocks identical.
        [group] = found.groups
        assert (group.gpu_model, group.busy, group.gpus) == ("H100", True, 80)
        [slow] = found.outliers
        assert slow.value == pytest.approx(group.median * 0.7, abs=1)  # clocks are whole MHz
        assert slow.deviations == (group.median - slow.value) / group.spread
        assert found.k == 4

        # The same, as an operator reads it on the command line.
        connect = ["--addr", plane.address, "--token", plane.operator_token]
        window = ["--since", str(since_ms), "--end", str(until_ms)]
        listing = [*connect, "metrics", "outliers", "--field", "sm_clock_mhz", *window]
        code, output = await asyncio.to_thread(gpucloud, *listing, "--json")
        assert code == 0, output
        listed = document(output)
        assert [(o["node_id"], o["gpu_index"]) for o in listed["outliers"]] == [("sim-0005", 6)]
        assert listed["k"] == 3
        code, output = await asyncio.to_thread(gpucloud, *listing)
        assert code == 0, output
        assert "sim-0005" in output, output
        assert f"{slow.deviations:.1f} spreads" in output, output

        # Each sweep strikes the slow GPU once; the policy drains at the third in a day.
        sweep = plane.plane.slow_gpus
        assert sweep is not None
        for _ in range(2):
            assert await sweep.sweep() == ["sim-0005"]
        await another_pass(plane, "sim-0005")
        assert (await operator.get_node("sim-0005")).state == "READY"
        assert await sweep.sweep() == ["sim-0005"]
        await another_pass(plane, "sim-0005")
        assert (await operator.get_node("sim-0005")).state == "QUARANTINED"
        assert await strikes(plane, "sim-0005") == [(6, "slow_gpu")] * 3
        [drain] = [e for e in (await operator.list_node_events("sim-0005")).items if e.event == "DRAIN"]
        assert drain.reason.startswith("DRAIN_AFTER_JOB: slow_gpu on GPU 6, 3 in 24 h")


async def test_outliers_are_for_operators_and_refuse_a_bad_k(tmp_path: Path, database_url: str) -> None:
    async with running_control_plane(tmp_path / "data", database_url) as plane, plane.client() as operator:
        created = await operator.create_tenant("acme")
        async with plane.client(created.token) as tenant:
            with pytest.raises(PermissionDeniedError):
                await tenant.list_metric_outliers(field="power_w", start=0, end=1000)
        with pytest.raises(InvalidArgumentError) as refused:
            await operator.list_metric_outliers(field="power_w", start=0, end=1000, k=-1)
        assert list(refused.value.field_violations) == ["k"]
        with pytest.raises(InvalidArgumentError) as refused:
            await operator.list_metric_outliers(field="Power W", start=1000, end=0)
        assert sorted(refused.value.field_violations) == ["end_ms", "field"]
        empty = await operator.list_metric_outliers(field="power_w", start=0, end=1000)
        assert (empty.groups, empty.outliers, empty.k) == ([], [], 3)


async def test_a_node_draining_after_its_job_is_taken_at_once_by_a_fault_that_cannot_wait(
    tmp_path: Path, database_url: str
) -> None:
    async with ready_fleet(tmp_path, database_url, 3) as (plane, fleet, operator):
        await operator.create_tenant("acme")
        before = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
        [node_id] = before.node_ids
        await operator.drain_node(node_id, reason="planned maintenance")
        assert (await operator.get_node(node_id)).state == "DRAINING"
        # A fault that can wait changes nothing: the node is draining already.
        fleet.inject(node_id, Fault.ECC, gpu=1, per_sample=5)

        async def struck_thrice() -> bool:
            return len(await strikes(plane, node_id)) >= 3

        await until(struck_thrice, timeout=30)
        await another_pass(plane, node_id)
        assert (await operator.get_allocation(before.allocation_id)).replacements == ()
        # One that cannot wait takes it from the tenant, with a spare in its place.
        fleet.inject(node_id, Fault.XID, gpu=3, code=48)
        after = await once_replaced(operator, before.allocation_id)
        [made] = after.replacements
        assert made.removed_node_id == node_id
        assert made.spare_node_id is not None
        assert made.reason.startswith("DRAIN_NOW: xid:48 on GPU 3")

"""The health controller against the real server and simulated agents: a GPU that falls off the
bus takes its node out of service with the evidence in its events, and so does correctable ECC
rising report after report; an application's XID only tells the tenant; a pool losing many
nodes at once keeps all but its hourly limit in service."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

from clients import AsyncClient
from clients.agent.control import Fault
from clients.agent.fleet import SimulatedFleet
from services.health.config import HealthConfig
from services.health.controller import NodeHealth
from services.store.tx import Sql, Tx
from tests.conftest import RunningControlPlane, running_control_plane, until
from tests.e2e.agent_wire import FAST

HEALTH = HealthConfig(removals_per_hour=2, removal_share_per_hour=0.10, resync_s=0.3, held_retry_s=0.3)


async def states(operator: AsyncClient) -> dict[str, str]:
    return {node.node_id: node.state for node in (await operator.list_nodes(page_size=1000)).items}


@asynccontextmanager
async def ready_fleet(
    tmp_path: Path, database_url: str, nodes: int
) -> AsyncIterator[tuple[RunningControlPlane, SimulatedFleet, AsyncClient]]:
    """A control plane with the health limits above, ``nodes`` simulated agents with every node
    READY, and an operator's client."""
    async with running_control_plane(tmp_path / "data", database_url, fleet=FAST, health=HEALTH) as plane:
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

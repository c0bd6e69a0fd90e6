"""A simulated fleet of agents against the real server: it registers, passes burn-in and reaches
READY; a slow node fails burn-in with its figures; telemetry lands in the metrics store; a lost
heartbeat is one unreachable mark and one recovery."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clients import AsyncClient
from clients.agent.control import Fault
from clients.agent.fleet import SimulatedFleet
from tests.conftest import RunningControlPlane, running_control_plane, until
from tests.e2e.agent_wire import FAST

NODES = 12
SLOW = "sim-0005"


@pytest.fixture
async def plane(tmp_path: Path, database_url: str) -> AsyncIterator[RunningControlPlane]:
    async with running_control_plane(tmp_path / "data", database_url, fleet=FAST) as running:
        yield running


async def states(operator: AsyncClient) -> dict[str, str]:
    return {node.node_id: node.state for node in (await operator.list_nodes(page_size=1000)).items}


async def test_a_simulated_fleet_converges_and_a_slow_node_fails_burn_in(plane: RunningControlPlane) -> None:
    fleet = SimulatedFleet(plane.address, NODES, interval_s=0.3, seed=7, burn_in_seconds=0.05, scrub_seconds=0.05)
    await fleet.mint_tokens(plane.operator_token)
    fleet.inject(SLOW, Fault.SLOW, factor=0.8)
    running = asyncio.create_task(fleet.run())
    try:
        async with plane.client() as operator:

            async def converged() -> bool:
                now = await states(operator)
                return len(now) == NODES and sorted(now.values()) == ["QUARANTINED"] + ["READY"] * (NODES - 1)

            await until(converged, timeout=30)
            assert (await states(operator))[SLOW] == "QUARANTINED"
            events = (await operator.list_node_events(SLOW)).items
            [failed] = [e for e in events if e.event == "FAIL_BURN_IN"]
            assert failed.reason.startswith("burn-in failed: gemm_tflops")
            assert "under" in failed.reason
            assert failed.actor == "control-plane"
            node = await operator.get_node("sim-0000")
            assert node.agent_managed
            assert not node.unreachable

            # The agents' telemetry is in the metrics store, under their own node.
            async def sampled() -> bool:
                end_ms = int(time.time() * 1000) + 1000
                result = await operator.query_metrics(
                    node_ids=["sim-0001"], fields=["power_w"], start=end_ms - 60_000, end=end_ms
                )
                return any(len(series.values) for series in result.series)

            await until(sampled)

            # A lost heartbeat, longer than the threshold: one mark, then one recovery.
            fleet.inject("sim-0002", Fault.LOST_HEARTBEAT, seconds=2.0)

            async def marked() -> bool:
                return (await operator.get_node("sim-0002")).unreachable

            await until(marked)

            async def recovered() -> bool:
                return not (await operator.get_node("sim-0002")).unreachable

            await until(recovered)
            events = (await operator.list_node_events("sim-0002")).items
            assert [e.event for e in events if e.event in ("UNREACHABLE", "REACHABLE")] == ["UNREACHABLE", "REACHABLE"]
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

"""Stopping the control plane leaves nothing running: every loop, the lease holder's reconciler
and its reconciles are cancelled and awaited."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gpucloud.v1 import agent_pb2
from tests.conftest import running_control_plane
from tests.e2e.agent_wire import FAST, WireAgent, burn_in


async def test_stop_leaves_no_task_running(tmp_path: Path, database_url: str) -> None:
    """Stopped with the reconciler leading and reconciles queued, no task the plane started remains."""
    before = asyncio.all_tasks()
    async with running_control_plane(tmp_path / "d", database_url, fleet=FAST) as plane, plane.client() as operator:
        agents = [await WireAgent.minted(operator, plane.address, f"node-{i}") for i in range(4)]
        for agent in agents:
            await agent.register()
        for agent in agents:
            await agent.report(burn_in(await agent.action(agent_pb2.ACTION_KIND_BURN_IN)))
            await agent.channel.close()
        leader = plane.plane.fleet_leader
        assert leader is not None
        assert leader.elector.is_leader
        started = asyncio.all_tasks() - before
        assert any(task.get_name() == "node-reconciler" for task in started)
    # The plane is stopped: what it started has ended, not merely been asked to.
    left = {task for task in asyncio.all_tasks() - before if task is not asyncio.current_task()}
    assert [task.get_name() for task in left if not task.done()] == []
    assert plane.plane.loops.status()["node-reconciler"].state == "stopped"

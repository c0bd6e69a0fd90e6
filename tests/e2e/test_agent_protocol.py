"""AgentService end to end: a real server, agents spoken by hand, the node reconciler deciding."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest

from clients import AsyncClient
from gpucloud.v1 import agent_pb2, node_pb2
from services.fleet import commands as fleet_commands
from services.fleet.config import FleetConfig
from tests.conftest import RunningControlPlane, running_control_plane, until
from tests.e2e.agent_wire import FAST, WireAgent, burn_in, scrub
from tests.e2e.test_health import strikes


@pytest.fixture
async def plane(tmp_path: Path, database_url: str) -> AsyncIterator[RunningControlPlane]:
    async with running_control_plane(tmp_path / "data", database_url, fleet=FAST) as running:
        yield running


@pytest.fixture
async def operator(plane: RunningControlPlane) -> AsyncIterator[AsyncClient]:
    async with plane.client() as client:
        yield client


async def state_of(operator: AsyncClient, node_id: str) -> str:
    return (await operator.get_node(node_id)).state


async def reasons(operator: AsyncClient, node_id: str, event: str) -> list[str]:
    return [e.reason for e in (await operator.list_node_events(node_id, page_size=1000)).items if e.event == event]


async def burn_in_fleet(operator: AsyncClient, address: str, scales: list[float]) -> list[WireAgent]:
    """Register one agent per scale and report each node's burn-in at that scale."""
    agents = [await WireAgent.minted(operator, address, f"node-{i}") for i in range(len(scales))]
    for agent in agents:
        registered = await agent.register()
        assert registered.node.state == node_pb2.NODE_STATE_BURN_IN
        assert registered.node.agent_managed
    for agent, scale in zip(agents, scales, strict=True):
        await agent.report(burn_in(await agent.action(agent_pb2.ACTION_KIND_BURN_IN), scale))
    return agents


async def test_burn_in_is_judged_against_the_fleet_median(plane: RunningControlPlane, operator: AsyncClient) -> None:
    """Nodes at the fleet's figures become READY; one 20% under fails with the figures as evidence."""
    agents = await burn_in_fleet(operator, plane.address, [1.0, 1.0, 1.0, 0.8])
    try:
        healthy, slow = [a.node_id for a in agents[:3]], agents[3].node_id

        async def settled() -> bool:
            states = [await state_of(operator, n) for n in (*healthy, slow)]
            return states == ["READY", "READY", "READY", "QUARANTINED"]

        await until(settled)
        [evidence] = await reasons(operator, slow, "FAIL_BURN_IN")
        assert evidence.startswith("burn-in failed: gemm_tflops 560.0 is 20.0% under 700.0;")
        # The median of the results in when the node was judged: at least the quorum of three.
        assert re.search(r"\(fleet median of [34] H100 nodes, tolerance 10%\)$", evidence), evidence
        [passed] = await reasons(operator, healthy[0], "PASS_BURN_IN")
        assert "gemm_tflops 700.0" in passed
        # Once READY an agent is asked for nothing more.
        instructions = await agents[0].beat()
        assert instructions.desired_state == node_pb2.NODE_STATE_READY
        assert list(instructions.actions) == []
        assert instructions.heartbeat_interval_ms == 300
    finally:
        for agent in agents:
            await agent.channel.close()


async def test_an_agent_speaks_only_for_its_own_node(plane: RunningControlPlane, operator: AsyncClient) -> None:
    """Another node's agent token is PERMISSION_DENIED on every AgentService call, and changes nothing."""
    async with (
        await WireAgent.minted(operator, plane.address, "node-a") as a,
        await WireAgent.minted(operator, plane.address, "node-b") as b,
    ):
        await a.register()
        await b.register()
        action = await b.action(agent_pb2.ACTION_KIND_BURN_IN)
        for call in (a.register("node-b"), a.beat("node-b"), a.report(burn_in(action), node_id="node-b")):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "speaks for node 'node-a', not 'node-b'" in (refused.value.details() or "")
        assert await state_of(operator, "node-b") == "BURN_IN"
        # Operators are not agents: they may not report for a node either.
        operator_agent = WireAgent("node-b", plane.operator_token, a.channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await operator_agent.beat()
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_silent_node_is_marked_unreachable_once_and_recovers_once(
    plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Past missed_beats intervals without a beat the node is unreachable (placement skips it);
    beating again clears it; each is one event whatever the number of sweeps."""
    async with await WireAgent.minted(operator, plane.address, "node-q") as agent:
        await agent.register()

        async def unreachable() -> bool:
            return (await operator.get_node("node-q")).unreachable

        await until(unreachable)
        [why] = await reasons(operator, "node-q", "UNREACHABLE")
        assert "3 beats of 0.3 s missed" in why
        # Several sweeps later, still one mark.
        assert plane.plane.reachability is not None
        sweeps = plane.plane.reachability.marked
        await agent.beat()

        async def reachable() -> bool:
            await agent.beat()
            return not (await operator.get_node("node-q")).unreachable

        await until(reachable)
        assert len(await reasons(operator, "node-q", "UNREACHABLE")) == 1
        assert len(await reasons(operator, "node-q", "REACHABLE")) == 1
        assert plane.plane.reachability.marked == sweeps


async def test_scrub_waits_for_the_agent_across_a_restart(tmp_path: Path, database_url: str) -> None:
    """A released node stays SCRUBBING until its agent confirms the scrub, also when the control
    plane restarts in between; a partial scrub quarantines the node instead of making it READY."""
    data = tmp_path / "data"
    async with running_control_plane(data, database_url, fleet=FAST) as first, first.client() as operator:
        agents = await burn_in_fleet(operator, first.address, [1.0, 1.0])
        for agent in agents:
            await until(partial(_is, operator, agent.node_id, "READY"))
        await operator.create_tenant("acme")
        allocation = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
        operation = await operator.cancel_allocation(allocation.allocation_id)
        # The allocation is released (the releaser's scrub stand-in is not used for agent nodes)...
        await operator.wait_operation(operation.name, timeout=15)
        for agent in agents:
            assert await state_of(operator, agent.node_id) == "SCRUBBING"
        scrub_ids = [await agent.action(agent_pb2.ACTION_KIND_SCRUB) for agent in agents]
        for agent in agents:
            await agent.channel.close()
    # ... and the nodes stay SCRUBBING through a restart until their agents confirm.
    async with running_control_plane(data, database_url, fleet=FAST) as second, second.client() as operator:
        whole, halfway = [WireAgent(a.node_id, a.token, grpc.aio.insecure_channel(second.address)) for a in agents]
        async with whole, halfway:
            for agent, scrub_id in zip((whole, halfway), scrub_ids, strict=True):
                assert await state_of(operator, agent.node_id) == "SCRUBBING"
                # The same attempt, by the same id: a restart does not ask for the work twice.
                assert await agent.action(agent_pb2.ACTION_KIND_SCRUB) == scrub_id
            await whole.report(scrub(scrub_ids[0]))
            await halfway.report(scrub(scrub_ids[1], keys_removed=False))
            await until(lambda: _is(operator, whole.node_id, "READY"))
            await until(lambda: _is(operator, halfway.node_id, "QUARANTINED"))
            [why] = await reasons(operator, halfway.node_id, "FAIL_SCRUB")
            assert "did not confirm keys_removed" in why
            assert await reasons(operator, halfway.node_id, "FINISH_SCRUB") == []


async def test_a_burn_in_with_no_result_times_out(tmp_path: Path, database_url: str) -> None:
    """A node whose agent never reports its burn-in is quarantined at the timeout, with the reason."""
    quick = FleetConfig(**{**FAST.__dict__, "burn_in_timeout_s": 0.5})
    async with (
        running_control_plane(tmp_path / "d", database_url, fleet=quick) as plane,
        plane.client() as operator,
        await WireAgent.minted(operator, plane.address, "node-t") as agent,
    ):
        await agent.register()
        await until(lambda: _is(operator, "node-t", "QUARANTINED"))
        [why] = await reasons(operator, "node-t", "FAIL_BURN_IN")
        assert why.startswith("burn-in timed out: nothing from the agent after")


async def _is(operator: AsyncClient, node_id: str, state: str) -> bool:
    return await state_of(operator, node_id) == state


async def test_a_journaled_xid_sent_again_counts_once(plane: RunningControlPlane, operator: AsyncClient) -> None:
    """An XID resent with its journal number and time (a replay) is one strike however often it
    comes, in later statuses too; another XID at the same millisecond, numbered on, is another."""
    async with await WireAgent.minted(operator, plane.address, "node-a") as agent:
        await agent.register()
        at_ms = round(time.time() * 1000) - 60_000

        def status(*xids: tuple[int, int]) -> agent_pb2.NodeStatus:
            gpu = agent_pb2.GpuStatus(
                index=3,
                present=True,
                xid_codes=[code for code, _ in xids],
                xid_times_ms=[at_ms] * len(xids),
                xid_seqs=[seq for _, seq in xids],
            )
            return agent_pb2.NodeStatus(gpus=[gpu])

        await agent.report(status=status((13, 1)))
        await agent.report(status=status((13, 1)))  # its answer was lost: sent again
        await agent.report(status=status((13, 1), (31, 2)))  # replayed after a restart, with a new one
        await agent.report(status=status((13, 3)))  # the same code at the same millisecond, numbered on
        assert sorted(await strikes(plane, "node-a")) == [(3, "xid:13"), (3, "xid:13"), (3, "xid:31")]

        # An agent clock ahead of the control plane's: the XID counts at each status's arrival,
        # which its replay does not share, and is still one strike.
        ahead = agent_pb2.GpuStatus(
            index=5, present=True, xid_codes=[48], xid_times_ms=[at_ms + 3_600_000], xid_seqs=[4]
        )
        for _ in range(2):
            await agent.report(status=agent_pb2.NodeStatus(gpus=[ahead]))
        assert sorted(await strikes(plane, "node-a"))[-1:] == [(5, "xid:48")]
        assert len(await strikes(plane, "node-a")) == 4

        # Numbers must match the codes one for one, and be journal numbers.
        for bad, times in (([1, 2], [at_ms]), ([0], [at_ms]), ([2**31], [at_ms]), ([9], [])):
            gpu = agent_pb2.GpuStatus(index=3, present=True, xid_codes=[13], xid_times_ms=times, xid_seqs=bad)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await agent.report(status=agent_pb2.NodeStatus(gpus=[gpu]))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "status.gpus[0].xid_seqs" in (refused.value.details() or "")


async def test_a_report_stored_while_its_node_moved_is_answered_with_the_new_action(
    plane: RunningControlPlane, operator: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report whose store is slow (a loaded machine) must not answer with the instructions of
    before: the node was released meanwhile, its stream pushed the scrub, and an answer without
    it would withdraw the scrub on the agent, with nothing to ask for it again."""
    [agent] = await burn_in_fleet(operator, plane.address, [1.0])
    async with agent:
        await until(partial(_is, operator, agent.node_id, "READY"))
        await operator.create_tenant("acme")
        allocation = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
        stored = asyncio.Event()
        report = fleet_commands.report

        async def slow_report(*args: Any, **kwargs: Any) -> Any:
            await stored.wait()
            return await report(*args, **kwargs)

        monkeypatch.setattr(fleet_commands, "report", slow_report)
        answer = asyncio.create_task(agent.report())
        await operator.wait_operation((await operator.cancel_allocation(allocation.allocation_id)).name, timeout=15)
        assert await state_of(operator, agent.node_id) == "SCRUBBING"
        stored.set()
        instructions = await answer
        assert instructions.desired_state == node_pb2.NODE_STATE_SCRUBBING
        assert [a.kind for a in instructions.actions] == [agent_pb2.ACTION_KIND_SCRUB]

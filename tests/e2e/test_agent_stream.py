"""AgentService.Connect end to end: instructions pushed as they change, the stream's rules, its
bounds, and its end when the server stops."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from clients import AsyncClient
from gpucloud.v1 import agent_pb2, node_pb2
from tests.conftest import RunningControlPlane, running_control_plane
from tests.e2e.agent_wire import FAST, WireAgent, burn_in

Stream = grpc.aio.StreamStreamCall[agent_pb2.ConnectRequest, agent_pb2.ConnectResponse]


@pytest.fixture
async def plane(tmp_path: Path, database_url: str) -> AsyncIterator[RunningControlPlane]:
    async with running_control_plane(tmp_path / "data", database_url, fleet=FAST) as running:
        yield running


@pytest.fixture
async def operator(plane: RunningControlPlane) -> AsyncIterator[AsyncClient]:
    async with plane.client() as client:
        yield client


async def pushed(stream: Stream) -> agent_pb2.Instructions:
    """The next instructions pushed on ``stream``, within 10 s."""
    answer = await asyncio.wait_for(stream.read(), 10)
    assert isinstance(answer, agent_pb2.ConnectResponse), answer
    return answer.instructions


async def ended(stream: Stream) -> grpc.aio.AioRpcError:
    """The error ``stream`` ended with, within 10 s."""

    async def drain() -> None:
        while await stream.read() is not grpc.aio.EOF:
            pass
        raise AssertionError("the stream ended with OK")

    with pytest.raises(grpc.aio.AioRpcError) as error:
        await asyncio.wait_for(drain(), 10)
    return error.value


async def test_instructions_are_pushed_when_the_stream_opens_and_whenever_they_change(
    plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """One beat, then nothing from the agent but its report: burn-in is asked for, then READY is
    pushed, each without waiting for a beat."""
    async with await WireAgent.minted(operator, plane.address, "node-s") as agent:
        await agent.register()
        stream = agent.connect()
        await stream.write(agent_pb2.ConnectRequest(node_id="node-s"))
        instructions = await pushed(stream)
        if not instructions.actions:  # opened before the reconciler started the burn-in
            instructions = await pushed(stream)
        assert instructions.desired_state == node_pb2.NODE_STATE_BURN_IN
        (action,) = instructions.actions
        assert action.kind == agent_pb2.ACTION_KIND_BURN_IN
        assert instructions.heartbeat_interval_ms == 300
        await agent.report(burn_in(action.action_id))
        ready = await pushed(stream)
        assert (ready.desired_state, list(ready.actions)) == (node_pb2.NODE_STATE_READY, [])
        assert (await operator.get_node("node-s")).state == "READY"
        stream.cancel()


async def test_a_beat_for_another_node_or_on_a_revoked_token_ends_the_stream(
    plane: RunningControlPlane, operator: AsyncClient
) -> None:
    async with (
        await WireAgent.minted(operator, plane.address, "node-a") as a,
        await WireAgent.minted(operator, plane.address, "node-b") as b,
    ):
        await a.register()
        await b.register()
        stream = a.connect()
        await stream.write(agent_pb2.ConnectRequest(node_id="node-a"))
        await pushed(stream)
        await stream.write(agent_pb2.ConnectRequest(node_id="node-b"))
        refused = await ended(stream)
        assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "speaks for node 'node-a', not 'node-b'" in (refused.details() or "")

        stream = b.connect()
        await stream.write(agent_pb2.ConnectRequest(node_id="node-b"))
        await pushed(stream)
        await operator.revoke_token(b.token_id)
        await stream.write(agent_pb2.ConnectRequest(node_id="node-b"))
        refused = await ended(stream)
        assert refused.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_streams_are_bounded_per_node_and_leave_the_servers_calls_free(tmp_path: Path, database_url: str) -> None:
    """Six nodes hold streams past a server bound of four calls, and calls still go through; a
    node's third stream is refused TOO_MANY_STREAMS."""
    async with (
        running_control_plane(tmp_path / "data", database_url, fleet=FAST, max_calls_in_flight=4) as plane,
        plane.client() as operator,
    ):
        agents = [await WireAgent.minted(operator, plane.address, f"node-{i}") for i in range(6)]
        try:
            streams = []
            for agent in agents:
                await agent.register()
                stream = agent.connect()
                await stream.write(agent_pb2.ConnectRequest(node_id=agent.node_id))
                await pushed(stream)
                streams.append(stream)
            second = agents[0].connect()
            await second.write(agent_pb2.ConnectRequest(node_id="node-0"))
            await pushed(second)
            third = agents[0].connect()
            refused = await ended(third)
            assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "has 2 streams open, its bound" in (refused.details() or "")
            assert (await agents[5].beat()).desired_state != node_pb2.NODE_STATE_UNSPECIFIED
            assert len((await operator.list_nodes()).items) == 6
            for stream in (*streams, second):
                stream.cancel()
        finally:
            for agent in agents:
                await agent.channel.close()


async def test_stopping_the_server_ends_every_stream_at_once(tmp_path: Path, database_url: str) -> None:
    """Open streams end UNAVAILABLE (SERVER_STOPPING) and do not hold the drain to its grace."""
    async with running_control_plane(tmp_path / "data", database_url, fleet=FAST, grace_seconds=30.0) as plane:
        async with plane.client() as operator:
            agent = await WireAgent.minted(operator, plane.address, "node-x")
        async with agent:
            await agent.register()
            stream = agent.connect()
            await stream.write(agent_pb2.ConnectRequest(node_id="node-x"))
            await pushed(stream)
            started = time.monotonic()
            await plane.plane.stop()
            assert time.monotonic() - started < 10.0  # the grace is 30 s
            refused = await ended(stream)
            assert refused.code() == grpc.StatusCode.UNAVAILABLE
            assert "the control plane is stopping" in (refused.details() or "")

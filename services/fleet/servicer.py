"""AgentService: protobuf in, fleet calls, protobuf out. No rules live here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from gpucloud.v1 import agent_pb2, agent_pb2_grpc
from services.auth.principal import current_principal
from services.errors import NotFound, Unavailable
from services.fleet import commands
from services.fleet.directives import Directives
from services.fleet.heartbeats import Heartbeats
from services.fleet.leader import FleetLeader
from services.fleet.proto import (
    checked_results,
    checked_status,
    gpu_details,
    gpu_readings,
    instructions_to_proto,
    stored_readings,
)
from services.fleet.repository import NodeRecord, StatusReport
from services.health.signals import observations
from services.nodes.commands import check_speaks_for
from services.nodes.proto import node_to_proto
from services.nodes.servicer import checked_inventory
from services.nodes.transitions import NodeState
from services.store.engine import Database
from services.validation import Violations, checked_id

Context = grpc.aio.ServicerContext[Any, Any]


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    """AgentService: each call speaks for the caller's own node only."""

    def __init__(self, store: Database, heartbeats: Heartbeats, directives: Directives, leader: FleetLeader) -> None:
        self._store = store
        self._heartbeats = heartbeats
        self._directives = directives
        self._leader = leader
        self._closing = False

    def close_streams(self) -> None:
        """End every open Connect stream (UNAVAILABLE) and refuse new ones: the server is
        stopping, and a stream would otherwise hold its drain for the whole grace period."""
        self._closing = True
        self._directives.wake_all()

    async def _record(self, node_id: str) -> NodeRecord:
        check_speaks_for(current_principal(), node_id)
        record = await self._directives.lookup(node_id)
        if record is None:
            raise NotFound.of("node", node_id, field_path="node_id")
        return record

    @staticmethod
    def _status(
        v: Violations, request: agent_pb2.RegisterAgentRequest | agent_pb2.ReportStatusRequest
    ) -> StatusReport | None:
        """The request's status, checked; None when it carries none."""
        if not request.HasField("status"):
            return None
        return StatusReport(checked_status(v, request.status), gpu_readings(request.status), stored_readings)

    def _instructions(self, record: NodeRecord) -> agent_pb2.Instructions:
        return instructions_to_proto(self._directives.instructions(record))

    async def RegisterAgent(
        self, request: agent_pb2.RegisterAgentRequest, context: Context
    ) -> agent_pb2.RegisterAgentResponse:
        """Register or confirm the caller's node; answer with the node and its instructions."""
        v = Violations()
        details = gpu_details(v, request)
        status = self._status(v, request)
        inventory = checked_inventory(request, v)
        view, record, heard_us = await commands.register_agent(
            self._store, current_principal(), inventory, details, status
        )
        self._directives.put(record)
        self._heartbeats.persisted(record.node_id, heard_us)
        if record.state is NodeState.REGISTERED:
            self._leader.notify(record.node_id)
        if status is not None and observations(status.readings, None, 0.0):
            self._leader.notify_health(record.node_id)  # it registered with a fault
        return agent_pb2.RegisterAgentResponse(node=node_to_proto(view), instructions=self._instructions(record))

    async def Heartbeat(self, request: agent_pb2.HeartbeatRequest, context: Context) -> agent_pb2.HeartbeatResponse:
        """Note the node heard, from memory only; answer with its instructions."""
        record = await self._record(checked_id("node_id", request.node_id))
        self._heartbeats.beat(record.node_id)
        return agent_pb2.HeartbeatResponse(instructions=self._instructions(record))

    async def Connect(
        self, requests: AsyncIterator[agent_pb2.ConnectRequest], context: Context
    ) -> AsyncIterator[agent_pb2.ConnectResponse]:
        """Note each beat as Heartbeat does; send the node's instructions at once and whenever
        they change. The first beat names the node (checked as Heartbeat checks it); the rest
        are read on a task of this call's own, and each must name the same node."""
        beats = aiter(requests)
        first = await anext(beats, None)
        if first is None:
            return  # closed before its first beat
        node_id = (await self._record(checked_id("node_id", first.node_id))).node_id
        self._heartbeats.beat(node_id)
        with self._directives.watch(node_id) as changed:
            reading = asyncio.create_task(self._beats(node_id, beats, changed), name=f"beats-{node_id}")
            try:
                sent = None
                while True:
                    changed.clear()
                    if reading.done():
                        reading.result()  # raises when the agent broke a rule
                        return  # the agent closed its side
                    if self._closing:
                        raise Unavailable(
                            reason="SERVER_STOPPING", message="the control plane is stopping; connect again"
                        )
                    instructions = self._directives.instructions(await self._record(node_id))
                    if instructions != sent:
                        yield agent_pb2.ConnectResponse(instructions=instructions_to_proto(instructions))
                        sent = instructions
                    await changed.wait()
            finally:
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)

    async def _beats(
        self, node_id: str, requests: AsyncIterator[agent_pb2.ConnectRequest], done: asyncio.Event
    ) -> None:
        """Note every beat of a stream for ``node_id``; ``done`` is set when the stream ends."""
        try:
            async for beat in requests:
                if beat.node_id != node_id:
                    # INVALID_ARGUMENT, PERMISSION_DENIED or NOT_FOUND, as for a first beat.
                    await self._record(checked_id("node_id", beat.node_id))
                self._heartbeats.beat(node_id)
        finally:
            done.set()

    async def ReportStatus(
        self, request: agent_pb2.ReportStatusRequest, context: Context
    ) -> agent_pb2.ReportStatusResponse:
        """Store the node's status and results; a result wakes the reconciler for the node."""
        v = Violations()
        v.identifier("node_id", request.node_id)
        status = self._status(v, request)
        results = checked_results(v, list(request.results))
        v.raise_if_any()
        record = await self._record(request.node_id)
        strikes = await commands.report(self._store, record.node_id, status, results)
        self._heartbeats.beat(record.node_id)
        if results:
            self._leader.notify(record.node_id)
        if strikes:
            self._leader.notify_health(record.node_id)
        # Answered with what the node is asked now, not when the call began: it may have moved
        # while the report was stored, its stream pushing the new action meanwhile, and an answer
        # from the record read before would withdraw that action on the agent, with nothing to
        # name it again (the stream pushes only on a change). Read from the store: a move made
        # by the scheduling pass or the releaser reaches the directives only at their refresh.
        now = await self._directives.reread(record.node_id) or record
        return agent_pb2.ReportStatusResponse(instructions=self._instructions(now))

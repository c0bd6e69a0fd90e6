"""A node agent spoken by hand over AgentService, for end-to-end tests of the protocol's rules:
every call is one the test chooses, with figures the test chooses."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType

import grpc

from clients import AsyncClient
from gpucloud.v1 import agent_pb2, agent_pb2_grpc, node_pb2
from services.fleet.config import FleetConfig
from tests.conftest import gpu_uuids, until

# Quick enough for tests, and far enough apart that a loaded machine does not trip them.
FAST = FleetConfig(
    heartbeat_interval_s=0.3,
    missed_beats=3,
    lease_duration_s=2.0,
    resync_s=0.3,
    directives_refresh_s=0.1,
)

# Figures of a healthy H100 node (GEMM TFLOP/s, memory GB/s, NCCL bus GB/s).
HEALTHY = (700.0, 3000.0, 450.0)


def burn_in(action_id: str, scale: float = 1.0) -> agent_pb2.ActionResult:
    """A burn-in result at ``scale`` times the healthy figures."""
    gemm, memory, nccl = (figure * scale for figure in HEALTHY)
    figures = agent_pb2.BurnInFigures(gemm_tflops=gemm, memory_bandwidth_gbps=memory, nccl_busbw_gbps=nccl)
    return agent_pb2.ActionResult(action_id=action_id, kind=agent_pb2.ACTION_KIND_BURN_IN, burn_in=figures)


def scrub(action_id: str, *, keys_removed: bool = True) -> agent_pb2.ActionResult:
    """A scrub report confirming a GPU reset and a disk wipe, and the key removal unless told not to."""
    report = agent_pb2.ScrubReport(gpus_reset=True, disks_wiped=True, keys_removed=keys_removed)
    return agent_pb2.ActionResult(action_id=action_id, kind=agent_pb2.ACTION_KIND_SCRUB, scrub=report)


@dataclass
class WireAgent:
    """One node's agent: its token and a channel to the control plane."""

    node_id: str
    token: str
    channel: grpc.aio.Channel
    # The token's public id, to revoke it by ("" when the test made the token otherwise).
    token_id: str = ""

    @classmethod
    async def minted(cls, operator: AsyncClient, address: str, node_id: str) -> WireAgent:
        """An agent for ``node_id`` with a token the operator mints for it."""
        created = await operator.create_agent_token(node_id)
        return cls(node_id, created.token, grpc.aio.insecure_channel(address), created.token_id)

    async def __aenter__(self) -> WireAgent:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.channel.close()

    @property
    def _stub(self) -> agent_pb2_grpc.AgentServiceStub:
        return agent_pb2_grpc.AgentServiceStub(self.channel)

    @property
    def _metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    async def register(self, node_id: str | None = None) -> agent_pb2.RegisterAgentResponse:
        """Register this agent's node (or try ``node_id``) with eight described GPUs."""
        node = node_id or self.node_id
        gpus = [
            node_pb2.Gpu(uuid=uuid, index=i, name="NVIDIA H100 80GB HBM3", driver_version="550.54.15", rail=i)
            for i, uuid in enumerate(gpu_uuids(node))
        ]
        request = agent_pb2.RegisterAgentRequest(
            node_id=node,
            gpu_model=node_pb2.GPU_MODEL_H100,
            gpus=gpus,
            zone="zone-a",
            rack="rack-0",
            leaf_switch="leaf-0",
        )
        return await self._stub.RegisterAgent(request, metadata=self._metadata, timeout=10)

    async def beat(self, node_id: str | None = None) -> agent_pb2.Instructions:
        """One heartbeat; the instructions it was answered with."""
        request = agent_pb2.HeartbeatRequest(node_id=node_id or self.node_id)
        return (await self._stub.Heartbeat(request, metadata=self._metadata, timeout=10)).instructions

    def connect(self) -> grpc.aio.StreamStreamCall[agent_pb2.ConnectRequest, agent_pb2.ConnectResponse]:
        """A Connect stream; the caller writes the beats and reads what is pushed."""
        return self._stub.Connect(metadata=self._metadata)

    async def report(
        self, *results: agent_pb2.ActionResult, node_id: str | None = None, status: agent_pb2.NodeStatus | None = None
    ) -> agent_pb2.Instructions:
        """One status report carrying ``results``."""
        request = agent_pb2.ReportStatusRequest(node_id=node_id or self.node_id, status=status, results=results)
        return (await self._stub.ReportStatus(request, metadata=self._metadata, timeout=10)).instructions

    async def action(self, kind: int) -> str:
        """Beat until the instructions ask for an action of ``kind``; its id."""
        found: list[str] = []

        async def asked() -> bool:
            found[:] = [a.action_id for a in (await self.beat()).actions if a.kind == kind]
            return bool(found)

        await until(asked)
        return found[0]

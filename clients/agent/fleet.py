"""``SimulatedFleet``: many simulated nodes' agents in one process, over one channel, each with
its own agent token, GPUs (``SimulatedGpus``) and work (``SimulatedWork``), and faults injected
by call or through a control file (clients/agent/control.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
import structlog

from clients.agent.control import GPUS_PER_NODE, ControlLineError, ControlTail, Fault, Injection, format_line
from clients.agent.fabric import SimulatedFabric
from clients.agent.inventory import ThrottleReason
from clients.agent.journal import Journal, journal_path
from clients.agent.runner import (
    DEFAULT_INTERVAL_S,
    DEFAULT_JITTER,
    DEFAULT_RPC_TIMEOUT_S,
    AgentStats,
    NodeAgent,
    NodeIdentity,
    RegistrationRefused,
    check_timing,
    open_channel,
)
from clients.agent.simulated import SimulatedGpus
from clients.agent.work import DEFAULT_BURN_IN_SECONDS, DEFAULT_SCRUB_SECONDS, SimulatedWork
from clients.async_client import AsyncClient
from clients.fan_out import fan_out

log = structlog.get_logger(__name__)

T = TypeVar("T")

# The fabric: 16 nodes to a rack, 4 racks to a leaf switch, 4 leaf switches to a zone.
NODES_PER_RACK = 16
RACKS_PER_LEAF = 4
LEAVES_PER_ZONE = 4
DEFAULT_MAX_IN_FLIGHT = 64
# How often the control file is read for new injections.
DEFAULT_CONTROL_POLL_S = 0.5
# A flapping link with no period given stays down for two heartbeat intervals, then up as long:
# long enough that beats are missed, short enough that it comes back before most detectors give up.
FLAP_PERIOD_INTERVALS = 2.0


class UnknownNode(LookupError):
    """The fleet has no node of that id."""

    def __init__(self, node_id: str) -> None:
        super().__init__(f"node_id: the fleet has no node {node_id!r}")
        self.node_id = node_id


def layout(count: int, models: Sequence[str] = ("H100",)) -> list[NodeIdentity]:
    """``count`` nodes ``sim-0000``, ``sim-0001``, ... placed in order: racks of
    ``NODES_PER_RACK`` share a model (``models`` in turn, rack by rack), leaf switches take
    ``RACKS_PER_LEAF`` racks and zones ``LEAVES_PER_ZONE`` leaf switches."""
    if count < 0:
        raise ValueError(f"count must be 0 or more, not {count}")
    if not models:
        raise ValueError("models must name at least one GPU model")
    nodes = []
    for index in range(count):
        rack = index // NODES_PER_RACK
        leaf = rack // RACKS_PER_LEAF
        nodes.append(
            NodeIdentity(
                node_id=f"sim-{index:04d}",
                gpu_model=models[rack % len(models)],
                zone=f"sim-zone-{leaf // LEAVES_PER_ZONE}",
                rack=f"sim-rack-{rack:03d}",
                leaf_switch=f"sim-leaf-{leaf:02d}",
            )
        )
    return nodes


@dataclass(frozen=True, slots=True)
class SimulatedNode:
    """One node of the fleet: its GPUs, its work and its agent."""

    identity: NodeIdentity
    gpus: SimulatedGpus
    work: SimulatedWork
    agent: NodeAgent
    fabric: SimulatedFabric


class SimulatedFleet:
    """``count`` simulated nodes (``layout``) whose agents talk to ``address``; run them with
    ``run()``, wait for them with ``wait_registered()``.

    ``tokens`` maps node ids to agent tokens; ``mint_tokens`` mints the missing ones. Every agent
    beats every ``interval_s`` (jittered by ``jitter``) and shares ``stats`` and one bound of
    ``max_in_flight`` calls. ``seed`` fixes every node's GPUs, figures and jitter. ``control_path``,
    when given, is a control file whose lines appended after the fleet was made are applied
    every ``control_poll_s``. ``journal_dir``, when given, holds each node's journal of
    undelivered XID events (``journal_path``), which a fleet started again over it replays.
    """

    def __init__(
        self,
        address: str,
        count: int,
        *,
        tokens: Mapping[str, str] | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        jitter: float = DEFAULT_JITTER,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        seed: int = 0,
        models: Sequence[str] = ("H100",),
        burn_in_seconds: float = DEFAULT_BURN_IN_SECONDS,
        scrub_seconds: float = DEFAULT_SCRUB_SECONDS,
        rpc_timeout_s: float = DEFAULT_RPC_TIMEOUT_S,
        control_path: Path | None = None,
        control_poll_s: float = DEFAULT_CONTROL_POLL_S,
        telemetry: bool = True,
        journal_dir: Path | None = None,
    ) -> None:
        check_timing(interval_s, jitter)
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be 1 or more, not {max_in_flight}")
        self.address = address
        self.stats = AgentStats()
        # Registrations refused, by node: those agents have stopped.
        self.refused: dict[str, RegistrationRefused] = {}
        self._max_in_flight = max_in_flight
        self._semaphore = asyncio.Semaphore(max_in_flight)
        # Half of the calls in flight at most are registrations: the rest stay free for the
        # heartbeats and reports of the agents registered already.
        self._registrations = asyncio.Semaphore(max(1, max_in_flight // 2))
        self._control = None if control_path is None else ControlTail(control_path)
        self._control_poll_s = control_poll_s
        given = tokens or {}
        self.nodes: dict[str, SimulatedNode] = {}
        for identity in layout(count, models):
            node_id, model = identity.node_id, identity.gpu_model
            gpus = SimulatedGpus(node_id, model=model, seed=seed)
            work = SimulatedWork(node_id, model, seed, burn_in_seconds=burn_in_seconds, scrub_seconds=scrub_seconds)
            fabric = SimulatedFabric()
            agent = NodeAgent(
                address,
                identity,
                given.get(node_id, ""),
                gpus,
                work,
                fabric=fabric,
                interval_s=interval_s,
                jitter=jitter,
                rpc_timeout_s=rpc_timeout_s,
                semaphore=self._semaphore,
                registrations=self._registrations,
                telemetry=telemetry,
                stats=self.stats,
                seed=seed,
                journal=Journal(None if journal_dir is None else journal_path(journal_dir, node_id)),
            )
            self.nodes[node_id] = SimulatedNode(identity, gpus, work, agent, fabric)

    @property
    def tokens(self) -> dict[str, str]:
        """Each node's agent token ("" where it has none yet)."""
        return {node_id: node.agent.token for node_id, node in self.nodes.items()}

    async def mint_tokens(self, operator_token: str) -> dict[str, str]:
        """Mint an agent token for every node without one (CreateAgentToken, at most
        ``max_in_flight`` at a time), keep them in memory and return them all. The first failure
        (a wrong operator token, say) stops the rest and is raised; the tokens minted before it
        stay with their nodes."""
        missing = [node.agent for node in self.nodes.values() if not node.agent.token]
        async with AsyncClient(self.address, operator_token) as client:

            async def mint(agent: NodeAgent) -> None:
                agent.token = (await client.create_agent_token(agent.identity.node_id)).token

            await fan_out(missing, mint, limit=self._max_in_flight)
        return self.tokens

    async def run(self) -> None:
        """Run every agent, and read the control file, over one channel until cancelled. An
        agent whose registration is refused stops (``refused`` says why); the others go on."""
        async with open_channel(self.address) as channel, asyncio.TaskGroup() as tasks:
            for node in self.nodes.values():
                tasks.create_task(self._run_agent(node.agent, channel), name=node.identity.node_id)
            if self._control is not None:
                tasks.create_task(self._watch_control(self._control), name="control")

    async def _run_agent(self, agent: NodeAgent, channel: grpc.aio.Channel) -> None:
        try:
            await agent.run(channel)
        except RegistrationRefused as refused:
            self.refused[agent.identity.node_id] = refused
            log.error("agent_registration_refused", node=agent.identity.node_id, error=str(refused))

    async def wait_registered(self) -> None:
        """Return once every agent has registered; raises the first ``RegistrationRefused``."""
        await asyncio.gather(*(node.agent.wait_registered() for node in self.nodes.values()))

    def inject(self, node_id: str, fault: Fault | str, **params: object) -> Injection:
        """Apply a fault to a node now (the parameters as ``Injection`` names them) and return it.
        Raises ``ControlLineError`` for a bad fault or parameter, ``UnknownNode``. Call it on
        the fleet's event loop."""
        injection = Injection.of(node_id, fault, **params)
        self.apply(injection)
        return injection

    def apply(self, injection: Injection) -> None:
        """Apply an injection to its node's GPUs, work or agent (``inject``)."""
        node = self.nodes.get(injection.node_id)
        if node is None:
            raise UnknownNode(injection.node_id)
        gpus, fault = node.gpus, injection.fault
        if fault is Fault.XID:
            gpus.inject_xid(_given(injection.gpu, "gpu"), _given(injection.code, "code"))
        elif fault is Fault.ECC:
            gpus.rising_ecc(_given(injection.gpu, "gpu"), _given(injection.per_sample, "per_sample"))
        elif fault is Fault.THROTTLE:
            gpus.throttle(_given(injection.gpu, "gpu"), ThrottleReason(_given(injection.reason, "reason")))
        elif fault is Fault.OFF_BUS:
            gpus.off_bus(_given(injection.gpu, "gpu"))
        elif fault is Fault.SLOW:
            factor = _given(injection.factor, "factor")
            for index in _gpus(injection):
                gpus.slow(index, factor)
            node.work.slow(factor)
        elif fault is Fault.PARTITION_LEAK:
            node.fabric.leak(_given(injection.key, "key"))
        else:
            self._apply_to_agent(node, injection)
        log.info("agent_fault_injected", node=injection.node_id, injection=format_line(injection))

    def _apply_to_agent(self, node: SimulatedNode, injection: Injection) -> None:
        agent = node.agent
        if injection.fault is Fault.LOST_HEARTBEAT:
            agent.lose_heartbeat(_given(injection.seconds, "seconds"))
        elif injection.fault is Fault.FLAPPING_LINK:
            period = injection.period or FLAP_PERIOD_INTERVALS * agent.interval_s
            agent.flap_link(_given(injection.seconds, "seconds"), period)
        elif injection.fault is Fault.CLEAR:
            for index in _gpus(injection):
                node.gpus.clear(index)
            if injection.gpu is None:
                node.work.slow(1.0)
                node.fabric.clear()
                agent.clear_faults()

    async def _watch_control(self, control: ControlTail) -> None:
        while True:
            for found in await asyncio.to_thread(control.read):
                if isinstance(found, ControlLineError):
                    log.warning("agent_control_line_refused", path=str(control.path), error=str(found))
                    continue
                try:
                    self.apply(found)
                except (ValueError, LookupError) as error:  # a bad value, an unknown node or GPU
                    log.warning("agent_control_line_refused", path=str(control.path), error=str(error))
            await asyncio.sleep(self._control_poll_s)


def _given(value: T | None, name: str) -> T:
    # An Injection carries every parameter its fault needs; this only narrows the type.
    if value is None:
        raise ControlLineError(name, "is required")
    return value


def _gpus(injection: Injection) -> range:
    """The GPU an injection names, or every GPU of the node."""
    return range(GPUS_PER_NODE) if injection.gpu is None else range(injection.gpu, injection.gpu + 1)

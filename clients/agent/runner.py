"""``NodeAgent``: one node's agent loop against the control plane's AgentService.

It registers the node with its inventory and status and opens its Connect stream with a first
beat, then every interval (jittered, starting at a random phase so that many agents do not beat
in step) sends a beat on the stream, a
ReportStatus when what it observes changed or an action finished, and one WriteSamples of its
GPUs' readings. The instructions come back on the stream whenever they change, so new work
starts at once rather than at the next beat; a broken stream is opened again at the next beat.
Each action the instructions name is performed once, in a task of its own; its result is sent
with every report until the instructions stop naming it. The pure parts (the jitter, the status and
its diffing, the action bookkeeping, the link faults) are plain classes and functions here.
"""

from __future__ import annotations

import asyncio
import functools
import math
import random
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TypeVar

import grpc
import structlog

from clients.agent.backend import GpuBackend
from clients.agent.fabric import Fabric, UnmanagedFabric
from clients.agent.inventory import GpuInfo, GpuSample
from clients.agent.journal import Entry, Journal
from clients.agent.work import NodeWork
from gpucloud.v1 import agent_pb2, agent_pb2_grpc, metrics_pb2, metrics_pb2_grpc, node_pb2

log = structlog.get_logger(__name__)

Q = TypeVar("Q")
A = TypeVar("A")

GPUS_PER_NODE = 8
DEFAULT_INTERVAL_S = 10.0
DEFAULT_JITTER = 0.1
DEFAULT_RPC_TIMEOUT_S = 10.0
DEFAULT_MAX_IN_FLIGHT = 4
# RegisterAgent's back-off between tries: doubling from the first to the cap.
REGISTER_BACKOFF_S = (0.1, 5.0)
# Codes after which RegisterAgent is tried again: the server is away or slow, or refused the
# call unrun at a bound on calls in flight. Any other is a refusal the agent cannot get past.
RETRY_REGISTER = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
)
# gRPC's reconnect back-off grows to 120 s by default: capped, as the client caps it
# (clients/async_client.py), an agent notices a restarted server within about a second.
CHANNEL_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000))
# The GPU models the API names (``H100``, ...), without the enum's prefix and its unspecified value.
GPU_MODELS = tuple(name.removeprefix("GPU_MODEL_") for name, value in node_pb2.GpuModel.items() if value)
# Action ids remembered after they were forgotten, so that an id seen again is not run twice.
REMEMBERED_ACTIONS = 256


class AgentError(Exception):
    """The agent cannot go on."""


class RegistrationRefused(AgentError):
    """RegisterAgent failed with a code that trying again would not change (a conflicting
    identity, a bad or revoked token, a server without AgentService)."""

    def __init__(self, node_id: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"node {node_id}: registration refused: {code.name}: {details}")
        self.node_id = node_id
        self.code = code


class _Dropped(Exception):
    """An injected link fault dropped the call before it was sent."""


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """What a node registers as besides its GPUs: its id, GPU model (``H100``, ...) and place in
    the fabric."""

    node_id: str
    gpu_model: str
    zone: str
    rack: str
    leaf_switch: str

    def __post_init__(self) -> None:
        """Refuse a GPU model the API does not have."""
        if self.gpu_model not in GPU_MODELS:
            raise ValueError(f"gpu_model: no GPU model {self.gpu_model!r}; known are {', '.join(GPU_MODELS)}")

    @property
    def gpu_model_value(self) -> node_pb2.GpuModel.ValueType:
        """The model as the API's enum."""
        return node_pb2.GpuModel.Value(f"GPU_MODEL_{self.gpu_model}")


def jittered(interval_s: float, jitter: float, rng: random.Random) -> float:
    """A delay drawn uniformly from ``[interval*(1-jitter), interval*(1+jitter)]``."""
    return rng.uniform(interval_s * (1.0 - jitter), interval_s * (1.0 + jitter))


def check_timing(interval_s: float, jitter: float) -> None:
    """ValueError unless the interval is a finite number of seconds above 0 and the jitter within [0, 1)."""
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise ValueError(f"interval_s must be a finite number of seconds above 0, not {interval_s}")
    if not 0.0 <= jitter < 1.0:
        raise ValueError(f"jitter must be within [0, 1), not {jitter}")


def gpu_messages(inventory: Iterable[GpuInfo]) -> list[node_pb2.Gpu]:
    """The inventory as RegisterAgent carries it; each GPU's rail is its index (a rail-optimized
    fabric cables GPU i of every node to rail i)."""
    return [
        node_pb2.Gpu(
            uuid=gpu.uuid,
            index=gpu.index,
            name=gpu.name,
            serial=gpu.serial or "",
            memory_bytes=gpu.memory_bytes,
            driver_version=gpu.driver_version,
            vbios_version=gpu.vbios_version or "",
            inforom_version=gpu.inforom_version or "",
            rail=gpu.index,
        )
        for gpu in inventory
    ]


# XID codes one status carries per GPU: the control plane refuses more (AgentService, GpuStatus).
XIDS_PER_GPU = 32


def node_status(
    samples: Iterable[GpuSample], xids: Iterable[Entry] = (), gpus: int = GPUS_PER_NODE, partitions: Sequence[int] = ()
) -> agent_pb2.NodeStatus:
    """GPUs ``0..gpus-1`` as the samples show them (one missing from them is not present), with
    the journal's XID entries on their GPUs (each with its time and number), and the node's
    fabric partitions."""
    by_index = {sample.index: sample for sample in samples}
    statuses = [agent_pb2.GpuStatus(index=index, present=index in by_index) for index in range(gpus)]
    for entry in xids:
        # The oldest first, at most as many a GPU as a status may carry: a backlog drains over
        # several reports rather than being refused whole, again and again.
        if 0 <= entry.gpu < gpus and len(statuses[entry.gpu].xid_codes) < XIDS_PER_GPU:
            status = statuses[entry.gpu]
            status.xid_codes.append(entry.code)
            status.xid_times_ms.append(entry.time_ms)
            status.xid_seqs.append(entry.seq)
    for index, status in enumerate(statuses):
        sample = by_index.get(index)
        if sample is not None:
            status.throttle_reasons.extend(sorted(reason.value for reason in sample.throttle_reasons or ()))
            status.ecc_corrected_total = sample.ecc_corrected_total or 0
            status.ecc_uncorrected_total = sample.ecc_uncorrected_total or 0
            if sample.remapped_rows is not None:
                status.remapped_rows_pending = sample.remapped_rows.pending
                status.remapped_rows_failure = sample.remapped_rows.failure
    return agent_pb2.NodeStatus(gpus=statuses, partition_keys=sorted(partitions))


def node_samples(node_id: str, samples: Sequence[GpuSample]) -> metrics_pb2.NodeSamples | None:
    """One WriteSamples entry of the node's readings; None when no GPU reported any."""
    gpus = [metrics_pb2.GpuSample(gpu_index=s.index, fields=s.fields()) for s in samples if s.fields()]
    if not gpus:
        return None
    return metrics_pb2.NodeSamples(node_id=node_id, timestamp_ms=samples[0].timestamp_ms, gpus=gpus)


class StatusTracker:
    """Which status to report and when: every status carries the journal's undelivered XID
    events, and a status is due when it differs from the last one the control plane stored
    (counters included), or when none was stored yet."""

    def __init__(self, journal: Journal | None = None, gpus: int = GPUS_PER_NODE) -> None:
        self._gpus = gpus
        # The XID events not delivered yet: kept through an outage of the control plane, and in
        # a file through a restart of the agent, so that a fault counts from when it happened.
        self.journal = journal if journal is not None else Journal()
        self._last_sent: agent_pb2.NodeStatus | None = None

    def observe(self, samples: Iterable[GpuSample], partitions: Sequence[int] = ()) -> agent_pb2.NodeStatus:
        """The status now, with every XID event the journal has not delivered."""
        return node_status(samples, self.journal.pending, self._gpus, partitions)

    def changed(self, status: agent_pb2.NodeStatus) -> bool:
        """Whether ``status`` differs from the last one the control plane stored (or none was)."""
        return self._last_sent is None or status != self._last_sent

    def sent(self, status: agent_pb2.NodeStatus) -> set[int]:
        """``status`` reached the control plane; the journal numbers it delivered."""
        self._last_sent = status
        return {seq for gpu in status.gpus for seq in gpu.xid_seqs}


class ActionBook:
    """The actions of the instructions: which to start (each id once while it is named), which
    were withdrawn while running (to cancel), and the results to send until they are
    acknowledged. A withdrawn action named again is started again (the control plane still
    wants its result: an answer from behind the node, a replica's or one read before the node
    moved, may withdraw it for a moment); one whose result was acknowledged never is.

    A result is acknowledged once a report carrying it was answered (it is stored then) and the
    instructions no longer name its action. Until a report carrying it is answered, instructions
    that stop naming it (a push, or an answer to a report sent before the result was) may be
    behind the node, and forgetting the result on their word would lose it for good."""

    def __init__(self) -> None:
        self._running: dict[str, agent_pb2.ActionKind.ValueType] = {}
        self._results: dict[str, agent_pb2.ActionResult] = {}
        # Results a report carried and the control plane answered: stored.
        self._stored: set[str] = set()
        self._forgotten: OrderedDict[str, None] = OrderedDict()

    def update(self, actions: Iterable[agent_pb2.Action]) -> tuple[list[agent_pb2.Action], list[str]]:
        """Take the actions the instructions name now: the new ones to start (marked running) and
        the ids of running ones no longer named (to cancel). Stored results no longer named are
        forgotten."""
        named = {action.action_id: action for action in actions if action.action_id}
        withdrawn = [action_id for action_id in self._running if action_id not in named]
        for action_id in withdrawn:
            del self._running[action_id]
        self._forget_stored(named.keys())
        known = self._running.keys() | self._results.keys() | self._forgotten.keys()
        start = [action for action_id, action in named.items() if action_id not in known]
        for action in start:
            self._running[action.action_id] = action.kind
        return start, withdrawn

    def stored(self, carried: Iterable[str]) -> None:
        """A report carrying the results of ``carried`` was answered: they are stored."""
        self._stored.update(action_id for action_id in carried if action_id in self._results)

    def _forget_stored(self, named: AbstractSet[str]) -> None:
        for action_id in [action_id for action_id in self._stored if action_id not in named]:
            self._stored.discard(action_id)
            del self._results[action_id]
            self._forget(action_id)

    def _forget(self, action_id: str) -> None:
        self._forgotten[action_id] = None
        while len(self._forgotten) > REMEMBERED_ACTIONS:
            self._forgotten.popitem(last=False)

    def finish(self, result: agent_pb2.ActionResult) -> bool:
        """Keep the result of a running action to send; False (dropped) if it was withdrawn."""
        if self._running.pop(result.action_id, None) is None:
            return False
        self._results[result.action_id] = result
        return True

    def results(self) -> list[agent_pb2.ActionResult]:
        """The results to send, oldest first."""
        return list(self._results.values())

    @property
    def running(self) -> frozenset[str]:
        """The ids of the actions being performed."""
        return frozenset(self._running)


@dataclass(slots=True)
class LinkFaults:
    """Injected link faults on a monotonic clock: silent until ``silent_until``; while flapping,
    down for ``period_s``, then up for as long, and so on until ``flap_until``."""

    silent_until: float = -math.inf
    flap_from: float = 0.0
    flap_until: float = -math.inf
    period_s: float = 1.0

    def dropping(self, now: float) -> bool:
        """Whether a call made at ``now`` is dropped."""
        if now < self.silent_until:
            return True
        if self.flap_from <= now < self.flap_until:
            return int((now - self.flap_from) // self.period_s) % 2 == 0
        return False


class LatencyHistogram:
    """Call latencies in buckets 10 % apart from 10 µs up: a quantile is within 10 % of the truth,
    in constant memory however many calls are counted."""

    FLOOR_S = 1e-5
    GROWTH = 1.1

    def __init__(self) -> None:
        self.count = 0
        self.total_s = 0.0
        self.max_s = 0.0
        self._buckets: Counter[int] = Counter()

    def record(self, seconds: float) -> None:
        """Count one call that took ``seconds``."""
        self.count += 1
        self.total_s += seconds
        self.max_s = max(self.max_s, seconds)
        ratio = max(seconds, self.FLOOR_S) / self.FLOOR_S
        self._buckets[math.ceil(math.log(ratio) / math.log(self.GROWTH) - 1e-9)] += 1

    def quantile(self, q: float) -> float:
        """The upper bound of the bucket holding quantile ``q`` (0-1) of the calls; 0 with none."""
        if self.count == 0:
            return 0.0
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for bucket in sorted(self._buckets):
            seen += self._buckets[bucket]
            if seen >= rank:
                return min(self.FLOOR_S * self.GROWTH**bucket, self.max_s)
        return self.max_s

    def merge(self, other: LatencyHistogram) -> None:
        """Add ``other``'s calls to these."""
        self.count += other.count
        self.total_s += other.total_s
        self.max_s = max(self.max_s, other.max_s)
        self._buckets.update(other._buckets)


@dataclass(slots=True)
class AgentStats:
    """Counters of one agent or of a fleet sharing them, for benchmarks: calls made and failed
    per kind, calls an injected fault dropped, and the latency of each RPC method's answered
    calls (``latencies``, by method name)."""

    registrations: int = 0
    beats_sent: int = 0
    beats_failed: int = 0
    reports_sent: int = 0
    reports_failed: int = 0
    telemetry_sent: int = 0
    telemetry_failed: int = 0
    rpcs_dropped: int = 0
    actions_done: int = 0
    beat_errors: int = 0
    latencies: dict[str, LatencyHistogram] = field(default_factory=dict)

    def latency(self, method: str) -> LatencyHistogram:
        """The histogram of RPC ``method`` (``Heartbeat``, ...), made on first use."""
        return self.latencies.setdefault(method, LatencyHistogram())

    def summary(self) -> str:
        """One line of the counters and the heartbeat latency."""
        beat = self.latency("Heartbeat")
        return (
            f"registered {self.registrations}, beats {self.beats_sent} ({self.beats_failed} failed),"
            f" reports {self.reports_sent} ({self.reports_failed} failed),"
            f" telemetry {self.telemetry_sent} ({self.telemetry_failed} failed), dropped {self.rpcs_dropped},"
            f" actions {self.actions_done}; heartbeat p50 {beat.quantile(0.5) * 1e3:.1f} ms"
            f" p99 {beat.quantile(0.99) * 1e3:.1f} ms"
        )


def open_channel(address: str) -> grpc.aio.Channel:
    """An insecure channel to ``address`` on the running loop, reconnecting within about a second."""
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


class NodeAgent:
    """One node's agent: ``run()`` registers and beats until cancelled; ``wait_registered()``
    answers once it registered. One event loop per agent.

    ``token`` is the node's agent token (``authorization: Bearer``); it may be set before
    ``run``. Every call goes through ``semaphore`` (a fleet shares one, bounding its calls in
    flight) with a deadline of ``rpc_timeout_s``; a registration first through
    ``registrations`` too, which a fleet makes smaller, so that thousands of agents starting at
    once never queue the registered ones' heartbeats and reports behind their registrations.
    ``telemetry=False`` sends no samples to MetricsService (a benchmark of the control loop
    alone). ``seed`` fixes the jitter; None draws it. ``journal`` keeps the XID events until
    they are delivered (journal.py); without one they are kept in memory.
    """

    def __init__(
        self,
        address: str,
        identity: NodeIdentity,
        token: str,
        backend: GpuBackend,
        work: NodeWork,
        *,
        fabric: Fabric | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        jitter: float = DEFAULT_JITTER,
        rpc_timeout_s: float = DEFAULT_RPC_TIMEOUT_S,
        semaphore: asyncio.Semaphore | None = None,
        registrations: asyncio.Semaphore | None = None,
        telemetry: bool = True,
        stats: AgentStats | None = None,
        seed: int | None = None,
        journal: Journal | None = None,
    ) -> None:
        check_timing(interval_s, jitter)
        if not (math.isfinite(rpc_timeout_s) and rpc_timeout_s > 0):
            raise ValueError(f"rpc_timeout_s must be a finite number of seconds above 0, not {rpc_timeout_s}")
        self.address = address
        self.identity = identity
        self.token = token
        self.stats = stats if stats is not None else AgentStats()
        self._backend = backend
        self._work = work
        self._fabric: Fabric = fabric if fabric is not None else UnmanagedFabric()
        self._interval_s = interval_s
        self._jitter = jitter
        self._rpc_timeout_s = rpc_timeout_s
        self._semaphore = semaphore if semaphore is not None else asyncio.Semaphore(DEFAULT_MAX_IN_FLIGHT)
        self._registrations = registrations if registrations is not None else asyncio.Semaphore(1)
        self._send_telemetry = telemetry
        self._random = random.Random() if seed is None else random.Random(f"agent/{identity.node_id}/{seed}")
        self._override_s: float | None = None
        self._book = ActionBook()
        self._status = StatusTracker(journal)
        self._faults = LinkFaults()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._failing: set[str] = set()
        self._wake = asyncio.Event()
        # Instructions withdrew a running action: report at the next beat, news or not, so that
        # an answer that is current names it again if it is still wanted (ActionBook).
        self._confirm = False
        self._registered = asyncio.Event()
        self._refusal: RegistrationRefused | None = None
        self._node: node_pb2.Node | None = None
        self._instructions = agent_pb2.Instructions()
        # The Connect stream the beats go on, and the task that follows what it pushes.
        self._stream: grpc.aio.StreamStreamCall[agent_pb2.ConnectRequest, agent_pb2.ConnectResponse] | None = None
        self._listener: asyncio.Task[None] | None = None

    @property
    def interval_s(self) -> float:
        """The heartbeat interval in force: the instructions', else the agent's own."""
        return self._interval_s if self._override_s is None else self._override_s

    @property
    def node(self) -> node_pb2.Node | None:
        """The node as the last registration answered it; None before."""
        return self._node

    @property
    def instructions(self) -> agent_pb2.Instructions:
        """The last instructions received."""
        return self._instructions

    async def wait_registered(self) -> node_pb2.Node:
        """The registered node, once RegisterAgent succeeded; raises ``RegistrationRefused`` if
        it was refused."""
        await self._registered.wait()
        if self._refusal is not None:
            raise self._refusal
        assert self._node is not None
        return self._node

    def lose_heartbeat(self, seconds: float) -> None:
        """Send nothing at all (beats, status, telemetry) for ``seconds`` from now."""
        self._faults.silent_until = asyncio.get_running_loop().time() + seconds

    def flap_link(self, seconds: float, period_s: float) -> None:
        """For ``seconds`` from now, drop every call for ``period_s``, then send for as long, and so on."""
        if not period_s > 0:
            raise ValueError(f"period_s must be above 0, not {period_s}")
        now = asyncio.get_running_loop().time()
        self._faults.flap_from, self._faults.flap_until, self._faults.period_s = now, now + seconds, period_s

    def clear_faults(self) -> None:
        """Undo ``lose_heartbeat`` and ``flap_link``."""
        self._faults = LinkFaults()

    async def run(self, channel: grpc.aio.Channel | None = None) -> None:
        """Register, then beat until cancelled, over ``channel`` (kept open) or a channel of its
        own to ``address``. Raises ``RegistrationRefused`` when a registration is refused."""
        if channel is not None:
            await self._run(channel)
            return
        async with open_channel(self.address) as own:
            await self._run(own)

    async def _run(self, channel: grpc.aio.Channel) -> None:
        agents = agent_pb2_grpc.AgentServiceStub(channel)
        metrics = metrics_pb2_grpc.MetricsServiceStub(channel)
        try:
            await self._register(agents)
            # The first beat (which opens the stream) goes at once, so that what the control
            # plane asks next (the burn-in's end, say) is pushed from then on; then a random
            # phase, so that agents started together do not beat together.
            pause = self._random.uniform(0.0, self.interval_s)
            while True:
                try:
                    await self._beat(agents, metrics)
                except AgentError:
                    raise
                except Exception:
                    # One bad beat (a backend error, say) must not end the agent.
                    self.stats.beat_errors += 1
                    log.exception("agent_beat_failed", node=self.identity.node_id)
                await self._pause(agents, pause)
                pause = jittered(self.interval_s, self._jitter, self._random)
        finally:
            if self._stream is not None:
                self._stream.cancel()
            tasks = [*self._tasks.values(), *([] if self._listener is None else [self._listener])]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    async def _rpc(self, method: grpc.aio.UnaryUnaryMultiCallable[Q, A], request: Q, name: str) -> A:
        if self._faults.dropping(asyncio.get_running_loop().time()):
            self.stats.rpcs_dropped += 1
            raise _Dropped
        async with self._semaphore:
            started = time.perf_counter()
            response = await method(request, metadata=self._metadata(), timeout=self._rpc_timeout_s)
            self.stats.latency(name).record(time.perf_counter() - started)
            return response

    async def _register(self, agents: agent_pb2_grpc.AgentServiceStub) -> None:
        identity = self.identity
        status = await self._observe(self._backend.sample())
        request = agent_pb2.RegisterAgentRequest(
            node_id=identity.node_id,
            gpu_model=identity.gpu_model_value,
            gpus=gpu_messages(self._backend.inventory()),
            zone=identity.zone,
            rack=identity.rack,
            leaf_switch=identity.leaf_switch,
            status=status,
        )
        backoff, cap = REGISTER_BACKOFF_S
        while True:
            try:
                async with self._registrations:
                    response = await self._rpc(agents.RegisterAgent, request, "RegisterAgent")
            except _Dropped:
                pass
            except grpc.aio.AioRpcError as error:
                if error.code() not in RETRY_REGISTER:
                    self._refusal = RegistrationRefused(identity.node_id, error.code(), error.details() or "")
                    self._registered.set()
                    raise self._refusal from None
                self._failed("RegisterAgent", error)
            else:
                self._ok("RegisterAgent")
                self.stats.registrations += 1
                self._node = response.node
                await self._delivered(status)
                self._follow(response.instructions)
                self._registered.set()
                log.debug("agent_registered", node=identity.node_id, state=node_pb2.NodeState.Name(response.node.state))
                return
            await asyncio.sleep(self._random.uniform(backoff / 2, backoff))
            backoff = min(cap, backoff * 2)

    async def _beat(
        self, agents: agent_pb2_grpc.AgentServiceStub, metrics: metrics_pb2_grpc.MetricsServiceStub
    ) -> None:
        await self._heartbeat(agents)
        samples = self._backend.sample()
        await self._report(agents, samples)
        if self._send_telemetry:
            await self._telemetry(metrics, samples)

    async def _heartbeat(self, agents: agent_pb2_grpc.AgentServiceStub) -> None:
        """One beat on the Connect stream, opening it first when there is none (or it ended)."""
        if self._faults.dropping(asyncio.get_running_loop().time()):
            self.stats.rpcs_dropped += 1
            return
        stream = self._stream
        if stream is None or stream.done():
            if stream is not None and await stream.code() == grpc.StatusCode.NOT_FOUND:
                # The control plane does not know the node (deleted, or its store was reset):
                # registering again is harmless for a node it knows, since the identity is the same.
                await self._register(agents)
            stream = self._stream = agents.Connect(metadata=self._metadata())
            self._listener = asyncio.create_task(self._listen(stream), name=f"{self.identity.node_id}/instructions")
        started = time.perf_counter()
        try:
            await stream.write(agent_pb2.ConnectRequest(node_id=self.identity.node_id))
        except grpc.aio.AioRpcError as error:
            self.stats.beats_failed += 1
            self._failed("Heartbeat", error)
            return
        except asyncio.InvalidStateError:
            self.stats.beats_failed += 1  # the stream had ended cleanly: the next beat opens another
            return
        self.stats.latency("Heartbeat").record(time.perf_counter() - started)
        self.stats.beats_sent += 1
        self._ok("Heartbeat")

    async def _listen(
        self, stream: grpc.aio.StreamStreamCall[agent_pb2.ConnectRequest, agent_pb2.ConnectResponse]
    ) -> None:
        """Follow the instructions the control plane pushes on ``stream`` until it ends."""
        try:
            async for pushed in stream:
                self._ok("Connect")
                self._follow(pushed.instructions)
        except grpc.aio.AioRpcError as error:
            self._failed("Connect", error)

    async def _report(self, agents: agent_pb2_grpc.AgentServiceStub, samples: Sequence[GpuSample]) -> None:
        status = await self._observe(samples)
        results = self._book.results()
        changed = self._status.changed(status)
        if not (changed or results or self._confirm):
            return
        request = agent_pb2.ReportStatusRequest(
            node_id=self.identity.node_id, status=status if changed else None, results=results
        )
        try:
            response = await self._rpc(agents.ReportStatus, request, "ReportStatus")
        except _Dropped:
            return
        except grpc.aio.AioRpcError as error:
            self.stats.reports_failed += 1
            self._failed("ReportStatus", error)
            return
        self.stats.reports_sent += 1
        self._ok("ReportStatus")
        if changed:
            await self._delivered(status)
        self._confirm = False
        self._book.stored(r.action_id for r in results)
        self._follow(response.instructions)

    async def _observe(self, samples: Sequence[GpuSample]) -> agent_pb2.NodeStatus:
        """The status to report: the XID events the driver raised since the last look go into
        the journal first (on disk before any report carries them). Events of a GPU the node
        does not have are dropped here: no status could carry them."""
        events = [event for event in self._backend.xid_events() if 0 <= event.index < GPUS_PER_NODE]
        if events:
            try:
                await asyncio.to_thread(self._status.journal.record, events)
            except OSError as error:  # kept in memory: reported all the same, not yet durable
                log.warning("agent_journal_write_failed", node=self.identity.node_id, error=str(error))
        return self._status.observe(samples, self._fabric.partitions())

    async def _delivered(self, status: agent_pb2.NodeStatus) -> None:
        """``status`` was stored: the journal entries it carried are delivered."""
        seqs = self._status.sent(status)
        if seqs:
            try:
                await asyncio.to_thread(self._status.journal.delivered, seqs)
            except OSError as error:  # still pending, so sent again: a replay counts once
                log.warning("agent_journal_write_failed", node=self.identity.node_id, error=str(error))

    async def _telemetry(self, metrics: metrics_pb2_grpc.MetricsServiceStub, samples: Sequence[GpuSample]) -> None:
        batch = node_samples(self.identity.node_id, samples)
        if batch is None:
            return
        try:
            await self._rpc(metrics.WriteSamples, metrics_pb2.WriteSamplesRequest(nodes=[batch]), "WriteSamples")
        except _Dropped:
            return
        except grpc.aio.AioRpcError as error:
            self.stats.telemetry_failed += 1
            self._failed("WriteSamples", error)
            return
        self.stats.telemetry_sent += 1
        self._ok("WriteSamples")

    async def _pause(self, agents: agent_pb2_grpc.AgentServiceStub, seconds: float) -> None:
        """Wait ``seconds``; an action finishing meanwhile is reported at once, not at the next beat."""
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        while (left := until - loop.time()) > 0:
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel that
                # arrives as the event is set, and the agent would beat on after being stopped.
                async with asyncio.timeout(left):
                    await self._wake.wait()
            except TimeoutError:
                return
            self._wake.clear()
            await self._report(agents, self._backend.sample())

    def _follow(self, instructions: agent_pb2.Instructions) -> None:
        self._instructions = instructions
        self._fabric.join_only(instructions.partition_keys)
        interval_ms = instructions.heartbeat_interval_ms
        self._override_s = interval_ms / 1000 if interval_ms > 0 else None
        start, withdrawn = self._book.update(instructions.actions)
        self._confirm = self._confirm or bool(withdrawn)
        for action_id in withdrawn:
            task = self._tasks.pop(action_id, None)
            if task is not None:
                task.cancel()
        for action in start:
            task = asyncio.create_task(self._perform(action), name=f"{self.identity.node_id}/{action.action_id}")
            self._tasks[action.action_id] = task
            task.add_done_callback(functools.partial(self._settled, action.action_id))

    def _settled(self, action_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(action_id) is task:
            del self._tasks[action_id]

    async def _perform(self, action: agent_pb2.Action) -> None:
        node = self.identity.node_id
        log.debug("agent_action_started", node=node, action=action.action_id, kind=action.kind)
        result = agent_pb2.ActionResult(action_id=action.action_id, kind=action.kind)
        try:
            if action.kind == agent_pb2.ACTION_KIND_BURN_IN:
                figures = await self._work.burn_in()
                result.burn_in.CopyFrom(
                    agent_pb2.BurnInFigures(
                        gemm_tflops=figures.gemm_tflops,
                        memory_bandwidth_gbps=figures.memory_bandwidth_gbps,
                        nccl_busbw_gbps=figures.nccl_busbw_gbps,
                    )
                )
            elif action.kind == agent_pb2.ACTION_KIND_SCRUB:
                report = await self._work.scrub()
                result.scrub.CopyFrom(
                    agent_pb2.ScrubReport(
                        gpus_reset=report.gpus_reset, disks_wiped=report.disks_wiped, keys_removed=report.keys_removed
                    )
                )
            else:
                result.error = f"this agent does not know action kind {action.kind}"
        except Exception as error:
            # Whatever stopped the work is the action's outcome, reported to the control plane.
            result.error = str(error) or type(error).__name__
        if self._book.finish(result):
            self.stats.actions_done += 1
            log.debug("agent_action_finished", node=node, action=action.action_id, error=result.error or None)
            self._wake.set()

    def _failed(self, method: str, error: grpc.aio.AioRpcError) -> None:
        # Logged when a method starts failing, not at every beat: a fleet facing a server that
        # is down would otherwise log thousands of lines a second.
        if method not in self._failing:
            self._failing.add(method)
            log.warning(
                "agent_rpc_failing",
                node=self.identity.node_id,
                method=method,
                code=error.code().name,
                details=error.details(),
            )

    def _ok(self, method: str) -> None:
        if method in self._failing:
            self._failing.discard(method)
            log.info("agent_rpc_recovered", node=self.identity.node_id, method=method)

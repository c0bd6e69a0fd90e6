"""NodeAgent's parts: the jitter, the status and when it is due, the action bookkeeping, the link
faults and the latency histogram as plain values; and the loop against a scripted AgentService
(registration and its retries, status on change, actions performed once, silence, the server's
interval)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from clients.agent import GpuSample, RemappedRows, ThrottleReason, XidEvent
from clients.agent.control import ControlLineError, Fault, Injection, append
from clients.agent.fleet import SimulatedFleet, UnknownNode, layout
from clients.agent.journal import Entry
from clients.agent.runner import (
    REMEMBERED_ACTIONS,
    ActionBook,
    LatencyHistogram,
    LinkFaults,
    NodeAgent,
    NodeIdentity,
    RegistrationRefused,
    StatusTracker,
    check_timing,
    gpu_messages,
    jittered,
    node_samples,
    node_status,
)
from clients.agent.simulated import SimulatedGpus
from clients.agent.work import BurnIn, NodeWork, Scrub, UnsupportedWork
from gpucloud.v1 import agent_pb2, metrics_pb2, node_pb2
from tests.clients.scripted_server import Behaviour, Start
from tests.conftest import until

AT_MS = 1_767_225_600_000
IDENTITY = NodeIdentity("sim-0001", "H100", "zone-a", "rack-1", "leaf-1")
BURN_IN = agent_pb2.ACTION_KIND_BURN_IN


def sample(index: int, *, ecc: int = 0, reasons: frozenset[ThrottleReason] = frozenset()) -> GpuSample:
    return GpuSample(
        index=index,
        timestamp_ms=AT_MS,
        temp_c=40.0,
        sm_clock_mhz=1980.0,
        mem_clock_mhz=2619.0,
        power_w=300.0,
        util_pct=50.0,
        memory_used_bytes=1024,
        ecc_corrected_total=ecc,
        ecc_uncorrected_total=0,
        remapped_rows=RemappedRows(correctable=0, uncorrectable=0, pending=index == 5, failure=False),
        throttle_reasons=reasons,
    )


def action(action_id: str, kind: agent_pb2.ActionKind.ValueType = BURN_IN) -> agent_pb2.Action:
    return agent_pb2.Action(action_id=action_id, kind=kind)


# The jitter ---------------------------------------------------------------------------------


def test_a_jittered_interval_stays_within_its_bounds_and_uses_them() -> None:
    rng = random.Random(1)
    delays = [jittered(10.0, 0.1, rng) for _ in range(2000)]
    assert all(9.0 <= delay <= 11.0 for delay in delays)
    assert min(delays) < 9.1
    assert max(delays) > 10.9
    assert {jittered(10.0, 0.0, rng) for _ in range(10)} == {10.0}


@pytest.mark.parametrize(
    ("interval", "jitter"), [(0.0, 0.1), (-1.0, 0.1), (float("inf"), 0.1), (1.0, 1.0), (1.0, -0.1)]
)
def test_an_interval_or_jitter_out_of_range_is_refused(interval: float, jitter: float) -> None:
    with pytest.raises(ValueError, match=r"interval_s|jitter"):
        check_timing(interval, jitter)


# What is sent ---------------------------------------------------------------------------------


def test_the_inventory_is_registered_with_each_gpu_on_its_own_rail() -> None:
    gpus = gpu_messages(SimulatedGpus("sim-0001").inventory())
    assert [(gpu.index, gpu.rail) for gpu in gpus] == [(i, i) for i in range(8)]
    assert gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert gpus[0].serial
    assert gpus[0].driver_version
    assert gpus[0].memory_bytes > 0
    assert len({gpu.uuid for gpu in gpus}) == 8


def test_a_gpu_missing_from_the_sample_is_not_present() -> None:
    samples = [
        sample(i, ecc=i, reasons=frozenset({ThrottleReason.SW_POWER_CAP, ThrottleReason.GPU_IDLE})) for i in range(7)
    ]
    status = node_status(samples, [Entry(4, 2, 48, AT_MS), Entry(5, 2, 63, AT_MS + 1), Entry(6, 9, 13, AT_MS)])
    assert [gpu.index for gpu in status.gpus] == list(range(8))
    assert [gpu.present for gpu in status.gpus] == [True] * 7 + [False]
    assert list(status.gpus[2].xid_codes) == [48, 63]
    assert list(status.gpus[2].xid_times_ms) == [AT_MS, AT_MS + 1]
    assert list(status.gpus[2].xid_seqs) == [4, 5]  # and GPU 9, which the node lacks, is left out
    assert list(status.gpus[1].throttle_reasons) == ["gpu_idle", "sw_power_cap"]
    assert status.gpus[3].ecc_corrected_total == 3
    assert status.gpus[5].remapped_rows_pending
    assert status.gpus[7] == agent_pb2.GpuStatus(index=7, present=False)


def test_a_backlog_of_xids_goes_out_32_a_gpu_oldest_first() -> None:
    """40 undelivered codes on GPU 0: a status carries the oldest 32, which the control plane
    accepts, and the code on GPU 1 besides; the rest wait for the next status."""
    backlog = [Entry(seq, 0, 13, AT_MS + seq) for seq in range(1, 41)] + [Entry(41, 1, 79, AT_MS)]
    status = node_status([], backlog)
    assert list(status.gpus[0].xid_seqs) == list(range(1, 33))
    assert list(status.gpus[1].xid_seqs) == [41]


def test_telemetry_is_one_node_batch_of_the_sampled_fields() -> None:
    batch = node_samples("sim-0001", [sample(0), sample(3)])
    assert batch is not None
    assert (batch.node_id, batch.timestamp_ms) == ("sim-0001", AT_MS)
    assert [gpu.gpu_index for gpu in batch.gpus] == [0, 3]
    assert dict(batch.gpus[1].fields) == sample(3).fields()
    assert node_samples("sim-0001", []) is None


def test_an_identity_with_an_unknown_model_is_refused() -> None:
    with pytest.raises(ValueError, match="no GPU model 'H999'; known are A100, H100, H200, B200, L40S"):
        NodeIdentity("n", "H999", "z", "r", "l")
    assert IDENTITY.gpu_model_value == node_pb2.GPU_MODEL_H100


# When a status is due -------------------------------------------------------------------------


def test_a_status_is_news_first_then_only_when_it_changes() -> None:
    tracker = StatusTracker()
    samples = [sample(i) for i in range(8)]
    status = tracker.observe(samples)
    assert tracker.changed(status)
    assert tracker.sent(status) == set()  # it carried no journal entry
    assert not tracker.changed(tracker.observe(samples))
    counted = [sample(i, ecc=1 if i == 4 else 0) for i in range(8)]
    assert tracker.changed(tracker.observe(counted))  # counters count
    assert tracker.changed(tracker.observe(samples[:7]))  # a GPU gone


def test_xid_codes_go_in_every_status_until_one_carrying_them_is_stored() -> None:
    tracker = StatusTracker()
    samples = [sample(i) for i in range(8)]
    tracker.journal.record([XidEvent(index=1, code=79, timestamp_ms=AT_MS)])
    tracker.observe(samples)
    tracker.journal.record([XidEvent(index=1, code=48, timestamp_ms=AT_MS + 5)])
    status = tracker.observe(samples)
    assert list(status.gpus[1].xid_codes) == [79, 48]  # not delivered yet: both
    assert list(status.gpus[1].xid_seqs) == [1, 2]
    assert tracker.sent(status) == {1, 2}
    tracker.journal.delivered({1, 2})
    after = tracker.observe(samples)
    assert list(after.gpus[1].xid_codes) == []
    assert tracker.changed(after)  # "no XID since" is news too


# Actions ------------------------------------------------------------------------------------


def test_an_action_starts_once_however_often_it_is_named() -> None:
    book = ActionBook()
    assert book.update([action("a1")]) == ([action("a1")], [])
    assert book.update([action("a1")]) == ([], [])
    assert book.running == {"a1"}
    result = agent_pb2.ActionResult(action_id="a1", kind=BURN_IN, error="boom")
    assert book.finish(result)
    assert book.update([action("a1")]) == ([], [])
    assert book.results() == [result]  # sent again while still named
    book.stored(["a1"])
    assert book.update([]) == ([], [])
    assert book.results() == []  # stored and no longer named: forgotten
    assert book.update([action("a1")]) == ([], [])  # and never run again


def test_a_running_action_no_longer_named_is_cancelled_and_its_result_dropped() -> None:
    book = ActionBook()
    book.update([action("a1"), action("s1", agent_pb2.ACTION_KIND_SCRUB)])
    started, withdrawn = book.update([action("s1", agent_pb2.ACTION_KIND_SCRUB), action("a2")])
    assert (started, withdrawn) == ([action("a2")], ["a1"])
    assert not book.finish(agent_pb2.ActionResult(action_id="a1"))
    assert book.results() == []
    assert book.running == {"s1", "a2"}


def test_only_the_last_acknowledged_ids_are_remembered() -> None:
    book = ActionBook()
    for n in range(REMEMBERED_ACTIONS + 1):
        book.update([action(f"a{n}")])
        assert book.finish(agent_pb2.ActionResult(action_id=f"a{n}", kind=BURN_IN))
        book.stored([f"a{n}"])
        book.update([])  # no longer named: acknowledged
    assert book.update([action("a0")]) == ([action("a0")], [])  # the oldest fell out
    assert book.update([action("a0"), action(f"a{REMEMBERED_ACTIONS}")]) == ([], [])


def test_a_result_is_kept_until_a_report_carrying_it_was_answered() -> None:
    """Instructions that stop naming an action before any report carried its result (a push, or
    the answer to a report sent before) may be behind the node: the result is kept and sent."""
    book = ActionBook()
    book.update([action("a1"), action("a2")])
    first, second = (agent_pb2.ActionResult(action_id=a, kind=BURN_IN) for a in ("a1", "a2"))
    assert book.finish(first)
    assert book.update([]) == ([], ["a2"])
    assert book.results() == [first]
    book.stored([])  # the answer to a report that carried nothing
    assert book.update([]) == ([], [])
    assert book.results() == [first]
    book.stored(["a1"])
    assert book.update([]) == ([], [])
    assert book.results() == []
    assert book.update([action("a1")]) == ([], [])  # acknowledged: never run again
    assert not book.finish(second)  # withdrawn while running: its result is not kept


def test_a_withdrawn_action_named_again_starts_again() -> None:
    """An answer that withdraws a running action for a moment (a replica behind the others)
    must not cost the action: the control plane still wants its result."""
    book = ActionBook()
    book.update([action("a1")])
    assert book.update([]) == ([], ["a1"])
    assert book.update([action("a1")]) == ([action("a1")], [])


# Link faults and latencies ------------------------------------------------------------------


def test_silence_drops_every_call_until_it_ends() -> None:
    faults = LinkFaults(silent_until=10.0)
    assert faults.dropping(0.0)
    assert faults.dropping(9.99)
    assert not faults.dropping(10.0)


def test_a_flapping_link_is_down_then_up_each_period_until_it_ends() -> None:
    faults = LinkFaults(flap_from=100.0, flap_until=110.0, period_s=2.0)
    assert not faults.dropping(99.0)
    assert [faults.dropping(100.0 + t) for t in (0.0, 1.9, 2.0, 3.9, 4.0, 6.5, 9.9)] == [
        True, True, False, False, True, False, True,
    ]  # fmt: skip
    assert not faults.dropping(110.0)


def test_latency_quantiles_are_within_ten_percent() -> None:
    histogram = LatencyHistogram()
    assert histogram.quantile(0.5) == 0.0
    for ms in range(1, 1001):
        histogram.record(ms / 1000)
    assert histogram.count == 1000
    assert 0.5 <= histogram.quantile(0.5) <= 0.55
    assert 0.99 <= histogram.quantile(0.99) <= 1.0
    assert histogram.max_s == 1.0
    other = LatencyHistogram()
    other.record(5.0)
    histogram.merge(other)
    assert (histogram.count, histogram.quantile(1.0)) == (1001, 5.0)


# The loop against a scripted server ----------------------------------------------------------

AGENT_SERVICE = "gpucloud.v1.AgentService/"
WRITE_SAMPLES = "gpucloud.v1.MetricsService/WriteSamples"


@dataclass
class Plane:
    """A scripted AgentService: names the actions in ``actions`` until ``keep_after`` reports
    carried each one's result, and records what it was sent."""

    register_codes: list[grpc.StatusCode] = field(default_factory=list)
    actions: list[agent_pb2.Action] = field(default_factory=list)
    keep_after: int = 1
    interval_ms: int = 0
    registered: list[agent_pb2.RegisterAgentRequest] = field(default_factory=list)
    beats: int = 0
    reports: list[agent_pb2.ReportStatusRequest] = field(default_factory=list)
    samples: list[metrics_pb2.WriteSamplesRequest] = field(default_factory=list)
    tokens: set[str] = field(default_factory=set)
    # Connect streams ended with UNAVAILABLE after their first beat, the first ones opened.
    streams_to_break: int = 0
    streams: int = 0
    # Reports answered as if no action were named, the first ones (an answer behind the node).
    stale_answers: int = 0

    def instructions(self) -> agent_pb2.Instructions:
        carried: dict[str, int] = {}
        for report in self.reports:
            for result in report.results:
                carried[result.action_id] = carried.get(result.action_id, 0) + 1
        named = [a for a in self.actions if carried.get(a.action_id, 0) < self.keep_after]
        return agent_pb2.Instructions(actions=named, heartbeat_interval_ms=self.interval_ms)

    def methods(self) -> dict[str, Behaviour]:
        async def register(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            self._token(context)
            if self.register_codes:
                await context.abort(self.register_codes.pop(0), "scripted")
            self.registered.append(agent_pb2.RegisterAgentRequest.FromString(request))
            node = node_pb2.Node(node_id=self.registered[-1].node_id, state=node_pb2.NODE_STATE_BURN_IN)
            return agent_pb2.RegisterAgentResponse(node=node, instructions=self.instructions()).SerializeToString()

        async def connect(
            requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, bytes]
        ) -> AsyncIterator[bytes]:
            # Pushes the instructions when a beat finds them changed (the real server pushes them
            # the moment they change).
            self._token(context)
            self.streams += 1
            sent = None
            async for request in requests:
                if self.streams <= self.streams_to_break:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "scripted break")
                assert agent_pb2.ConnectRequest.FromString(request).node_id == IDENTITY.node_id
                self.beats += 1
                now = self.instructions()
                if now != sent:
                    yield agent_pb2.ConnectResponse(instructions=now).SerializeToString()
                    sent = now

        async def report(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            self._token(context)
            self.reports.append(agent_pb2.ReportStatusRequest.FromString(request))
            answer = self.instructions()
            if self.stale_answers:
                self.stale_answers -= 1
                answer = agent_pb2.Instructions(heartbeat_interval_ms=self.interval_ms)
            return agent_pb2.ReportStatusResponse(instructions=answer).SerializeToString()

        async def write(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            self._token(context)
            self.samples.append(metrics_pb2.WriteSamplesRequest.FromString(request))
            return metrics_pb2.WriteSamplesResponse().SerializeToString()

        return {
            AGENT_SERVICE + "RegisterAgent": register,
            AGENT_SERVICE + "Connect": connect,
            AGENT_SERVICE + "ReportStatus": report,
            WRITE_SAMPLES: write,
        }

    def _token(self, context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
        self.tokens.update(str(value) for key, value in context.invocation_metadata() or () if key == "authorization")


@dataclass
class CountingWork:
    """Work that counts its runs; burn-in fails with ``error`` when given."""

    error: str | None = None
    runs: int = 0

    async def burn_in(self) -> BurnIn:
        self.runs += 1
        if self.error is not None:
            raise RuntimeError(self.error)
        return BurnIn(gemm_tflops=740.0, memory_bandwidth_gbps=3000.0, nccl_busbw_gbps=480.0)

    async def scrub(self) -> Scrub:
        self.runs += 1
        return Scrub(gpus_reset=True, disks_wiped=True, keys_removed=False)


@contextlib.asynccontextmanager
async def running(agent: NodeAgent) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(agent.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, RegistrationRefused):
            await task


def make_agent(
    address: str, gpus: SimulatedGpus | None = None, work: NodeWork | None = None, interval_s: float = 0.05
) -> NodeAgent:
    return NodeAgent(
        address,
        IDENTITY,
        "gpc_tok_secret",
        gpus or SimulatedGpus(IDENTITY.node_id),
        work or UnsupportedWork(),
        interval_s=interval_s,
        seed=1,
    )


async def test_it_registers_its_inventory_with_its_token_once_the_server_answers(scripted: Start) -> None:
    plane = Plane(register_codes=[grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED])
    agent = make_agent(await scripted(plane.methods()))
    async with running(agent):
        node = await asyncio.wait_for(agent.wait_registered(), 10)
    assert node.state == node_pb2.NODE_STATE_BURN_IN
    assert agent.node == node
    (request,) = plane.registered
    assert (request.node_id, request.gpu_model, request.zone, request.rack, request.leaf_switch) == (
        "sim-0001", node_pb2.GPU_MODEL_H100, "zone-a", "rack-1", "leaf-1",
    )  # fmt: skip
    assert list(request.gpus) == gpu_messages(SimulatedGpus(IDENTITY.node_id).inventory())
    assert plane.tokens == {"Bearer gpc_tok_secret"}
    assert agent.stats.registrations == 1


async def test_a_refused_registration_ends_the_run(scripted: Start) -> None:
    plane = Plane(register_codes=[grpc.StatusCode.PERMISSION_DENIED])
    agent = make_agent(await scripted(plane.methods()))
    with pytest.raises(RegistrationRefused, match="sim-0001: registration refused: PERMISSION_DENIED: scripted"):
        await asyncio.wait_for(agent.run(), 10)
    with pytest.raises(RegistrationRefused):
        await agent.wait_registered()


async def test_status_is_registered_then_reported_only_on_change_and_telemetry_every_beat(scripted: Start) -> None:
    plane = Plane()
    gpus = SimulatedGpus(IDENTITY.node_id)
    agent = make_agent(await scripted(plane.methods()), gpus)
    async with running(agent):
        await until(lambda: plane.beats >= 5 and len(plane.samples) >= 5)
        # The status went with the registration; nothing changed since, so nothing was reported.
        [registered] = plane.registered
        assert [gpu.present for gpu in registered.status.gpus] == [True] * 8
        assert plane.reports == []
        gpus.inject_xid(2, 48)
        await until(lambda: any(list(r.status.gpus[2].xid_codes) == [48] for r in plane.reports))
        seen, beats = len(plane.reports), plane.beats
        await until(lambda: plane.beats >= beats + 5)
        assert len(plane.reports) <= seen + 1  # the status without the XID, then nothing new
        # Between two beats (the last one's telemetry has arrived), the counters agree with the server.
        await until(lambda: len(plane.samples) == plane.beats)
        assert agent.stats.beats_sent == plane.beats
        assert agent.stats.latency("Heartbeat").count == plane.beats
    batch = plane.samples[-1].nodes[0]
    assert (batch.node_id, [gpu.gpu_index for gpu in batch.gpus]) == ("sim-0001", list(range(8)))
    assert batch.gpus[0].fields["power_w"] > 0


async def test_an_action_runs_once_and_its_result_is_sent_until_withdrawn(scripted: Start) -> None:
    plane = Plane(actions=[action("burn-1")], keep_after=2)
    work = CountingWork()
    agent = make_agent(await scripted(plane.methods()), work=work)
    async with running(agent):
        await until(lambda: plane.instructions().actions == [])
        beats = plane.beats
        await until(lambda: plane.beats >= beats + 5)
    carrying = [r for r in plane.reports if r.results]
    assert len(carrying) == 2
    assert carrying[0].results[0].burn_in.gemm_tflops == 740.0
    # The status is unchanged since the registration carried it: the results travel alone.
    assert [r.HasField("status") for r in carrying] == [False, False]
    assert work.runs == 1
    assert agent.stats.actions_done == 1


@dataclass
class HeldScrub:
    """A scrub that runs until ``done`` is set; counts its starts."""

    done: asyncio.Event = field(default_factory=asyncio.Event)
    starts: int = 0

    async def burn_in(self) -> BurnIn:
        raise NotImplementedError

    async def scrub(self) -> Scrub:
        self.starts += 1
        await self.done.wait()
        return Scrub(gpus_reset=True, disks_wiped=True, keys_removed=True)


async def test_a_scrub_withdrawn_by_an_answer_behind_the_node_is_asked_for_again_and_done(
    scripted: Start,
) -> None:
    """The stream names a scrub; the answer to a report sent meanwhile does not (read before the
    node moved). The agent reports again at its next beat, is told the scrub again, and runs it."""
    plane = Plane(actions=[action("scrub-1", agent_pb2.ACTION_KIND_SCRUB)], stale_answers=1)
    gpus, work = SimulatedGpus(IDENTITY.node_id), HeldScrub()
    agent = make_agent(await scripted(plane.methods()), gpus, work)
    async with running(agent):
        # Started, and the stream has pushed what it will push: nothing changes on the plane.
        await until(lambda: work.starts == 1 and plane.beats >= 2)
        gpus.throttle(2, ThrottleReason.HW_SLOWDOWN)  # news, once: a report goes out
        await until(lambda: work.starts == 2)
        assert plane.stale_answers == 0
        work.done.set()
        await until(lambda: any(r.results for r in plane.reports))
    [result] = next(r.results for r in plane.reports if r.results)
    assert (result.action_id, result.scrub.keys_removed) == ("scrub-1", True)


async def test_a_work_error_is_the_actions_error(scripted: Start) -> None:
    plane = Plane(actions=[action("burn-1")])
    agent = make_agent(await scripted(plane.methods()), work=UnsupportedWork())
    async with running(agent):
        await until(lambda: any(r.results for r in plane.reports))
    (result,) = next(r.results for r in plane.reports if r.results)
    assert (result.action_id, result.kind, result.WhichOneof("result")) == ("burn-1", BURN_IN, None)
    assert "GEMM and NCCL" in result.error


async def test_a_lost_heartbeat_sends_nothing_for_that_long(scripted: Start) -> None:
    plane = Plane()
    agent = make_agent(await scripted(plane.methods()))
    async with running(agent):
        # Between two beats: the last one's telemetry, its final call, has arrived.
        await until(lambda: plane.beats >= 2 and len(plane.samples) == plane.beats)
        agent.lose_heartbeat(0.5)
        calls = (plane.beats, len(plane.reports), len(plane.samples))
        await until(lambda: agent.stats.rpcs_dropped >= 6)
        assert (plane.beats, len(plane.reports), len(plane.samples)) == calls
        await until(lambda: plane.beats > calls[0])  # and it beats again afterwards


async def test_a_broken_stream_is_opened_again_at_the_next_beat(scripted: Start) -> None:
    plane = Plane(streams_to_break=2)
    agent = make_agent(await scripted(plane.methods()))
    async with running(agent):
        await until(lambda: plane.streams == 3)
        beats = plane.beats
        await until(lambda: plane.beats >= beats + 3)
        assert plane.streams == 3  # the unbroken stream carries every later beat


async def test_the_servers_interval_overrides_the_agents(scripted: Start) -> None:
    plane = Plane(interval_ms=20)
    agent = make_agent(await scripted(plane.methods()), interval_s=60.0)
    async with running(agent):
        await until(lambda: plane.beats >= 3)  # at 60 s, it would not have beaten yet
    assert agent.interval_s == 0.02


# The fleet ------------------------------------------------------------------------------------


def test_the_fleet_layout_fills_racks_then_leaves_then_zones() -> None:
    nodes = layout(300, models=("H100", "A100"))
    assert [n.node_id for n in nodes[:2]] == ["sim-0000", "sim-0001"]
    assert (nodes[15].rack, nodes[16].rack) == ("sim-rack-000", "sim-rack-001")
    assert (nodes[63].leaf_switch, nodes[64].leaf_switch) == ("sim-leaf-00", "sim-leaf-01")
    assert (nodes[255].zone, nodes[256].zone) == ("sim-zone-0", "sim-zone-1")
    assert [nodes[i].gpu_model for i in (0, 15, 16, 32)] == ["H100", "H100", "A100", "H100"]
    assert layout(300, models=("H100", "A100")) == nodes


async def test_injections_reach_the_nodes_gpus_work_and_agent() -> None:
    fleet = SimulatedFleet("127.0.0.1:1", 3, tokens={"sim-0001": "gpc_a_b"})
    assert fleet.tokens == {"sim-0000": "", "sim-0001": "gpc_a_b", "sim-0002": ""}
    node = fleet.nodes["sim-0001"]
    fleet.inject("sim-0001", "off-bus", gpu=6)
    assert [gpu.index for gpu in node.gpus.sample()] == [0, 1, 2, 3, 4, 5, 7]
    fleet.inject("sim-0001", Fault.SLOW, factor=0.8)
    assert node.work.factor == 0.8
    assert fleet.nodes["sim-0002"].work.factor == 1.0
    fleet.inject("sim-0001", "lost-heartbeat", seconds=30)
    assert node.agent.stats is fleet.stats
    fleet.inject("sim-0001", "clear")
    assert len(node.gpus.sample()) == 8
    assert node.work.factor == 1.0
    with pytest.raises(UnknownNode, match="no node 'sim-0009'"):
        fleet.inject("sim-0009", "clear")
    with pytest.raises(ControlLineError, match=r"^gpu: is required for xid$"):
        fleet.inject("sim-0001", "xid", code=79)


async def test_a_fleet_registers_every_node_and_applies_lines_of_its_control_file(
    scripted: Start, tmp_path: Path
) -> None:
    plane = Plane()
    control = tmp_path / "inject.jsonl"
    append(control, Injection("sim-0002", Fault.XID, gpu=1, code=13))  # before the fleet: not applied
    fleet = SimulatedFleet(
        await scripted(plane.methods()), 3, interval_s=0.05, max_in_flight=2, control_path=control, control_poll_s=0.01
    )
    for node_id, node in fleet.nodes.items():
        node.agent.token = f"tok-{node_id}"
    task = asyncio.create_task(fleet.run())
    try:
        await asyncio.wait_for(fleet.wait_registered(), 10)
        assert sorted(r.node_id for r in plane.registered) == ["sim-0000", "sim-0001", "sim-0002"]
        append(control, Injection("sim-0002", Fault.XID, gpu=1, code=48))
        await until(lambda: any(r.node_id == "sim-0002" and list(r.status.gpus[1].xid_codes) for r in plane.reports))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    codes = [list(r.status.gpus[1].xid_codes) for r in plane.reports if r.node_id == "sim-0002"]
    assert [48] in codes
    assert [13] not in codes
    assert plane.tokens == {"Bearer tok-sim-0000", "Bearer tok-sim-0001", "Bearer tok-sim-0002"}

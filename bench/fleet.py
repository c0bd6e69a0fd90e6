"""A fleet of simulated agents provisioned through the control plane, then in steady state.

    uv run python bench/fleet.py [--nodes 10000] [--interval 10] [--steady 60] [--telemetry] [--database-url URL]

The control plane runs in a spawned process of its own, as ``gpucloud serve`` does (logging at
warning); the simulated fleet (clients/agent/fleet.py) runs in this process. The fleet's agent
tokens are minted first (timed apart: it is provisioning paperwork, not convergence). Then every
agent starts at once, registers, runs its burn-in, and the node reconciler judges it: the clock
stops when every node is READY. After one interval to settle, the steady state is measured for
``--steady`` seconds: each agent beats every interval and reports status only when it changes.
With ``--telemetry`` each also sends its GPUs' samples to MetricsService every interval; without
it (the default) the figures are the control loop's alone. A 10,000-node fleet's telemetry is
960,000 series (8 GPUs x 12 fields), past the metrics store's default bound of 100,000 and
this machine's memory for the head: telemetry at that scale is measured by bench/telemetry.py,
not here.

Printed: time to converge; each call's p50/p99 while converging and how many a node made, and
the server's CPU and write transactions a node; the heartbeat's p50/p99 in steady
state (a message written on the agent's Connect stream, as the agents saw it);
server CPU seconds per 1,000 heartbeats and its share of one core; database write transactions
and rows per heartbeat; nodes marked unreachable that never stopped beating (false marks).

Goals on a 2-core machine: all nodes READY within 60 s; steady state under half of one core;
no false unreachable mark. The same 2-core kind of machine runs at different speeds from one day
to the next, so the bench first measures a yardstick in the same run: the server CPU of a bare
grpc.aio unary call (no interceptor, no database, an empty answer), and prints a node's cost as
a multiple of it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing as mp
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, bench/ comes first on sys.path, where bench/tsdb.py would hide the tsdb package.
sys.path[:0] = [str(ROOT), str(ROOT / "proto")]

CONVERGE_GOAL_S = 60.0
CPU_GOAL_CORES = 0.5


@dataclass(frozen=True)
class ServerSample:
    """What the server process reports of itself at one instant."""

    cpu_s: float
    committed: int
    heartbeat_rows: int
    states: dict[str, int]
    unreachable_marks: int


def serve(data_dir: str, database_url: str | None, interval_s: float, pipe: Connection) -> None:
    """Run a control plane on a free loopback port (sent down ``pipe`` with its operator token),
    then answer each message on ``pipe`` with a ``ServerSample``."""
    from services.fleet.config import FleetConfig
    from services.heap import tune_collector
    from services.log_config import configure
    from services.server import ControlPlane, ServerConfig
    from services.store.tx import Sql, Tx

    def census() -> Tx[tuple[dict[str, int], int]]:
        states = yield Sql("SELECT state, COUNT(*) FROM nodes GROUP BY state")
        marks = yield Sql("SELECT COUNT(*) FROM node_events WHERE event = 'UNREACHABLE'")
        first = marks.first()
        return {str(s): int(n) for s, n in states.rows}, 0 if first is None else int(first[0])

    async def main() -> None:
        configure("warning", "json")
        config = ServerConfig(
            data_dir=Path(data_dir),
            listen="127.0.0.1:0",
            database_url=database_url,
            fleet=FleetConfig(heartbeat_interval_s=interval_s),
        )
        plane = ControlPlane(config)
        await plane.start()
        tune_collector()  # as `gpucloud serve` does
        pipe.send((plane.port, plane.operator_token_path.read_text().strip()))
        store = plane.database
        assert store is not None
        # The pipe is read on a thread: a read on the loop would block it whenever the reader
        # woke for a message another wakeup had already taken.
        while await asyncio.to_thread(pipe.recv) != "stop":
            states, marks = await store.query(census())
            heartbeats = plane.heartbeats
            rows = 0 if heartbeats is None else heartbeats.rows_written
            pipe.send(ServerSample(time.process_time(), store.committed, rows, states, marks))
        await plane.stop()

    asyncio.run(main())


def serve_bare(pipe: Connection) -> None:
    """Run a grpc.aio server whose one method answers empty bytes at once (the yardstick), and
    answer each message on ``pipe`` with the process's CPU seconds."""
    import grpc

    async def echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return b""

    async def main() -> None:
        server = grpc.aio.server()
        handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(echo)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Bare", {"Echo": handler}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        pipe.send(port)
        while await asyncio.to_thread(pipe.recv) != "stop":
            pipe.send(time.process_time())
        await server.stop(None)

    asyncio.run(main())


async def bare_call_cpu_s(calls: int = 20_000, in_flight: int = 64) -> float:
    """Server CPU seconds of one bare grpc.aio unary call, measured over ``calls`` calls."""
    import grpc

    context = mp.get_context("spawn")
    pipe, child = context.Pipe()
    process = context.Process(target=serve_bare, args=(child,), daemon=True)
    process.start()
    port = pipe.recv()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        echo: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary("/bench.Bare/Echo")
        await echo(b"")  # the connection is made before the clock starts
        remaining = calls

        async def caller() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await echo(b"")

        pipe.send("sample")
        before = await asyncio.to_thread(pipe.recv)
        await asyncio.gather(*(caller() for _ in range(in_flight)))
        pipe.send("sample")
        after = await asyncio.to_thread(pipe.recv)
    pipe.send("stop")
    process.join(timeout=30)
    return float(after - before) / calls


class Server:
    """The control plane's process and the pipe to it."""

    def __init__(self, data_dir: str, database_url: str | None, interval_s: float) -> None:
        context = mp.get_context("spawn")
        self._pipe, child = context.Pipe()
        self.process = context.Process(target=serve, args=(data_dir, database_url, interval_s, child), daemon=True)
        self.process.start()
        port, self.operator_token = self._pipe.recv()
        self.address = f"127.0.0.1:{port}"

    async def sample(self) -> ServerSample:
        self._pipe.send("sample")
        answer: ServerSample = await asyncio.to_thread(self._pipe.recv)
        return answer

    def stop(self) -> None:
        self._pipe.send("stop")
        self.process.join(timeout=30)


async def run(
    nodes: int, interval_s: float, steady_s: float, database_url: str | None, telemetry: bool, max_in_flight: int
) -> bool:
    import logging

    import structlog

    from clients.agent.fleet import SimulatedFleet

    # The agents log their failures only: a line per node and beat would cost the simulator more
    # than its calls.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    bare_s = await bare_call_cpu_s()
    print(f"yardstick: a bare grpc.aio unary call cost its server {bare_s * 1e3:.3f} ms of CPU on this machine now")
    with tempfile.TemporaryDirectory(prefix="gpucloud-fleet-") as data_dir:
        server = Server(data_dir, database_url, interval_s)
        fleet = SimulatedFleet(
            server.address, nodes, interval_s=interval_s, seed=1, telemetry=telemetry, max_in_flight=max_in_flight
        )
        # The fleet's objects live as long as the run: out of the collector's way, as the
        # server's startup heap is (services/heap.py's tune_collector).
        gc.freeze()
        began = time.perf_counter()
        await fleet.mint_tokens(server.operator_token)
        print(f"minted {nodes:,} agent tokens in {time.perf_counter() - began:.1f} s")

        began, before = time.perf_counter(), await server.sample()
        agents = asyncio.create_task(fleet.run())
        try:
            while True:
                sample = await server.sample()
                ready = sample.states.get("READY", 0)
                elapsed = time.perf_counter() - began
                print(f"{elapsed:5.1f} s  {ready:6,} of {nodes:,} READY  {sample.states}", flush=True)
                if ready == nodes or elapsed > 10 * CONVERGE_GOAL_S:
                    break
                await asyncio.sleep(1.0)
            converged_s = time.perf_counter() - began
            for method in ("RegisterAgent", "ReportStatus", "Heartbeat"):
                seen = fleet.stats.latency(method)
                print(
                    f"while converging, {method} p50 {seen.quantile(0.5) * 1e3:.1f} ms,"
                    f" p99 {seen.quantile(0.99) * 1e3:.1f} ms, {seen.count / nodes:.2f} a node"
                )
            node_cpu_s = (sample.cpu_s - before.cpu_s) / nodes
            print(
                f"while converging, a node cost the server {node_cpu_s * 1e3:.1f} ms of CPU"
                f" ({node_cpu_s / bare_s:.1f} bare unary calls)"
                f" and {(sample.committed - before.committed) / nodes:.2f} write transactions"
            )
            await asyncio.sleep(interval_s)  # one interval to settle into the steady beat

            fleet.stats.latencies.clear()
            beats, statuses = fleet.stats.beats_sent, fleet.stats.reports_sent
            start, started = await server.sample(), time.perf_counter()
            await asyncio.sleep(steady_s)
            end, seconds = await server.sample(), time.perf_counter() - started
            beats, statuses = fleet.stats.beats_sent - beats, fleet.stats.reports_sent - statuses
        finally:
            agents.cancel()
            await asyncio.gather(agents, return_exceptions=True)
            server.stop()

    latency = fleet.stats.latency("Heartbeat")
    cpu = end.cpu_s - start.cpu_s
    transactions = end.committed - start.committed
    rows = end.heartbeat_rows - start.heartbeat_rows + statuses
    reports = beats + statuses
    cores = cpu / seconds
    print(f"converged: {nodes:,} nodes READY in {converged_s:.1f} s (goal {CONVERGE_GOAL_S:.0f} s)")
    print(
        f"steady state over {seconds:.0f} s at a {interval_s:g} s interval: {beats:,} heartbeats,"
        f" {statuses:,} status reports, {fleet.stats.telemetry_sent:,} telemetry pushes in all"
    )
    print(
        f"heartbeat (a write on the Connect stream) p50 {latency.quantile(0.5) * 1e3:.1f} ms,"
        f" p99 {latency.quantile(0.99) * 1e3:.1f} ms"
    )
    print(
        f"server CPU {cpu:.1f} s = {cores:.2f} of one core (goal < {CPU_GOAL_CORES}),"
        f" {cpu / max(reports, 1) * 1000:.2f} s per 1,000 reports"
    )
    print(
        f"database: {transactions / max(reports, 1):.4f} write transactions and {rows / max(reports, 1):.3f} rows"
        f" per report ({transactions} transactions, {rows:,} rows)"
    )
    print(f"false unreachable marks: {end.unreachable_marks}")
    met = converged_s <= CONVERGE_GOAL_S and cores < CPU_GOAL_CORES and end.unreachable_marks == 0
    print("goals:", "MET" if met else "NOT MET")
    return met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--interval", type=float, default=10.0, help="heartbeat interval, seconds")
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state measured")
    parser.add_argument("--database-url", default=None, help="postgresql+asyncpg://... (default: SQLite)")
    parser.add_argument("--telemetry", action="store_true", help="agents also send their GPUs' samples")
    parser.add_argument("--max-in-flight", type=int, default=64, help="the simulator's bound on calls in flight")
    args: Any = parser.parse_args(argv)
    met = asyncio.run(
        run(args.nodes, args.interval, args.steady, args.database_url, args.telemetry, args.max_in_flight)
    )
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())

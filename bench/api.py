"""Throughput of CreateAllocation+CancelAllocation through the real client, against an empty
unary grpc.aio call measured in the same run on the same machine.

    uv run python bench/api.py [--seconds 16] [--rounds 8] [--concurrency 8 64] [--database-url URL]
    uv run python bench/api.py --no-database      # the allocation commands stubbed

Each server runs in its own spawned process (no gRPC state crosses a fork); the load runs in
this process through ``clients.AsyncClient``. Both are measured at each concurrency (calls in
flight): at 8 a pair's rate is the latency of its two durable commits, not a throughput; at 64
the empty calls keep both cores busy and the control plane is bound by its event loop. The
seconds of each measurement are split into rounds that alternate empty calls and pairs, so that
drift in a shared machine's speed weighs on both sides alike; one round's ratio moves by
several points, hence 16 s in 8 rounds by default.

Goal: create+cancel pairs/s >= 20% of empty calls/s on SQLite, judged at the highest
concurrency measured (64 by default). A create counts once its allocation is admitted: one that
answers PENDING (every node still scrubbing) is waited for, then cancelled.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:  # imported where used: this module's import must not load our packages
    from clients import AsyncClient

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, bench/ comes first on sys.path, where bench/tsdb.py would hide the tsdb package.
sys.path[:0] = [str(ROOT), str(ROOT / "proto")]

EMPTY_METHOD = "/bench.Empty/Ping"
# Create+cancel pairs per second over empty calls per second, at the most calls in flight.
GOAL = 0.20


def _identity(data: bytes) -> bytes:
    return data


def serve_empty(port_queue: mp.Queue[int]) -> None:
    """Serve one empty unary method on a free loopback port, which goes into ``port_queue``."""

    async def main() -> None:
        async def ping(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            return b""

        handler = grpc.method_handlers_generic_handler(
            "bench.Empty",
            {"Ping": grpc.unary_unary_rpc_method_handler(ping, _identity, _identity)},
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        port_queue.put(port)
        await server.wait_for_termination()

    asyncio.run(main())


def _without_database() -> None:
    """Replace the allocation commands with in-memory stand-ins: what is left is the cost of
    gRPC, the interceptor (auth, logging), validation, protobuf conversion and the client."""
    from services.allocations import commands
    from services.allocations.repository import Allocation, AllocationView
    from services.allocations.requests import Created
    from services.ids import new_id
    from services.operations.repository import Operation

    def view(allocation_id: str, state: str) -> AllocationView:
        return AllocationView(Allocation(allocation_id, "bench", "H100", 1, state, created_us=1), ("bench-0000",))

    async def create(store: object, request: object, policies: object = None, scheduler: object = None) -> Created:
        return Created(view(new_id("alloc"), "ACTIVE"), replayed=False)

    async def cancel(
        store: object, principal: object, allocation_id: str, scheduler: object = None
    ) -> tuple[Operation, AllocationView]:
        operation = Operation("op-bench", "bench", "x", allocation_id, False, None, 2, None)
        return operation, view(allocation_id, "CANCELLING")

    commands.create = create
    commands.cancel = cancel


def serve_control_plane(data_dir: str, database_url: str | None, no_database: bool, port_queue: mp.Queue[int]) -> None:
    """Serve a control plane as ``gpucloud serve`` does (its collector tuned), logging at
    warning only, on a free loopback port, which goes into ``port_queue``. The services are
    imported here, so that a caller may put another tree first on sys.path beforehand."""
    from services.heap import tune_collector
    from services.log_config import configure
    from services.server import ControlPlane, ServerConfig

    if no_database:
        _without_database()

    async def main() -> None:
        configure("warning", "json")
        plane = ControlPlane(
            ServerConfig(data_dir=Path(data_dir), listen="127.0.0.1:0", database_url=database_url, scrub_seconds=0)
        )
        await plane.start()
        tune_collector()  # as `gpucloud serve` does
        assert plane.port is not None
        port_queue.put(plane.port)
        await plane.wait()

    asyncio.run(main())


@dataclass(frozen=True)
class Measured:
    """Calls completed in measured windows, and the CPU spent over them."""

    calls: int
    seconds: float
    # Server CPU seconds: its main thread (the event loop) and the whole process; None where
    # /proc cannot be read (not Linux).
    server_main: float | None
    server_process: float | None
    # This process's CPU seconds: the client side, which shares the machine's cores.
    client: float

    @property
    def rate(self) -> float:
        """Calls per second."""
        return self.calls / self.seconds

    def per_call(self, cpu_seconds: float | None) -> float | None:
        """``cpu_seconds`` per call, None where it is unknown or nothing completed."""
        return None if cpu_seconds is None or not self.calls else cpu_seconds / self.calls

    def __add__(self, other: Measured) -> Measured:
        """Both windows together."""

        def both(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a + b

        return Measured(
            self.calls + other.calls,
            self.seconds + other.seconds,
            both(self.server_main, other.server_main),
            both(self.server_process, other.server_process),
            self.client + other.client,
        )


def _cpu_seconds(pid: int) -> tuple[float, float] | None:
    """(main thread, whole process) CPU seconds of ``pid`` so far, from /proc."""

    def ticks(path: str) -> int:
        with open(path) as handle:
            # The command name (field 2) may hold spaces; utime and stime follow it.
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    try:
        per_second = os.sysconf("SC_CLK_TCK")
        return ticks(f"/proc/{pid}/task/{pid}/stat") / per_second, ticks(f"/proc/{pid}/stat") / per_second
    except (OSError, ValueError, IndexError):
        return None


async def _drive(seconds: float, concurrency: int, one: Callable[[], Awaitable[None]], server_pid: int) -> Measured:
    """Run ``one`` in ``concurrency`` loops for ``seconds``, after a short warm-up."""
    done = 0
    stop_at = time.perf_counter() + 0.5

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            await one()
            done += 1

    await asyncio.gather(*(loop() for _ in range(concurrency)))  # warm-up
    done = 0
    before = _cpu_seconds(server_pid)
    client_before = time.process_time()
    started = time.perf_counter()
    stop_at = started + seconds
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    client = time.process_time() - client_before
    after = _cpu_seconds(server_pid)
    if before is None or after is None:
        return Measured(done, elapsed, None, None, client)
    return Measured(done, elapsed, after[0] - before[0], after[1] - before[1], client)


async def bench_empty(port: int, server_pid: int, seconds: float, concurrency: int) -> Measured:
    """Empty calls per second at ``concurrency`` in flight."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        ping = channel.unary_unary(EMPTY_METHOD, request_serializer=_identity, response_deserializer=_identity)

        async def one() -> None:
            await ping(b"", timeout=10)

        return await _drive(seconds, concurrency, one, server_pid)


async def register_fleet(port: int, operator_token: str, nodes: int) -> str:
    """Register ``nodes`` READY H100 nodes and a tenant; return the tenant's token."""
    from clients import AsyncClient

    async with AsyncClient(f"127.0.0.1:{port}", operator_token) as operator:
        for i in range(nodes):
            node_id = f"bench-{i:04d}"
            await operator.register_node(
                node_id,
                gpu_model="H100",
                gpu_uuids=[f"GPU-{node_id}-{g}" for g in range(8)],
                zone="zone-a",
                rack=f"rack-{i // 8}",
                leaf_switch=f"leaf-{i // 16}",
            )
            await operator.complete_burn_in(node_id)
        return (await operator.create_tenant("bench")).token


async def create_and_cancel(tenant: AsyncClient) -> None:
    """One pair: allocate a node (waiting for its admission when it queues), then cancel the allocation."""
    allocation = await tenant.create_allocation(gpu_model="H100", node_count=1)
    if allocation.state == "PENDING":
        # Every node is still scrubbing: the scheduler admits it once one is back.
        await tenant.wait_admitted(allocation.allocation_id, timeout=60, poll_s=0.01)
    await tenant.cancel_allocation(allocation.allocation_id)


async def bench_control_plane(
    port: int, server_pid: int, tenant_token: str, seconds: float, concurrency: int
) -> Measured:
    """Create+cancel pairs per second through the real client."""
    from clients import AsyncClient

    async with AsyncClient(f"127.0.0.1:{port}", tenant_token) as tenant:
        return await _drive(seconds, concurrency, partial(create_and_cancel, tenant), server_pid)


def start_server(target: Callable[..., None], *args: object) -> tuple[mp.process.BaseProcess, int]:
    """Run ``target(*args, port_queue)`` in a spawned daemon process; return it and its port."""
    ctx = mp.get_context("spawn")
    queue: mp.Queue[int] = ctx.Queue()
    process = ctx.Process(target=target, args=(*args, queue), daemon=True)
    process.start()
    return process, queue.get(timeout=60)


Rounds = dict[int, list[tuple[Measured, Measured]]]  # per concurrency: (empty, pairs) per round


def measure(args: argparse.Namespace) -> Rounds:
    """Start both servers and alternate empty-call and pair rounds at each concurrency."""
    share = args.seconds / args.rounds
    rounds: Rounds = {c: [] for c in args.concurrency}
    with tempfile.TemporaryDirectory(prefix="gpucloud-bench-") as data_dir:
        empty_process, empty_port = start_server(serve_empty)
        plane_process, plane_port = start_server(serve_control_plane, data_dir, args.database_url, args.no_database)
        try:
            assert empty_process.pid is not None
            assert plane_process.pid is not None
            token_file = Path(data_dir) / "operator.token"
            if not token_file.exists():
                # Written only on the first start of a database: this one has been used before.
                sys.exit("bench: --database-url must name an empty database (its fleet and tenant are the bench's own)")
            tenant_token = asyncio.run(register_fleet(plane_port, token_file.read_text().strip(), args.nodes))
            for concurrency in args.concurrency:
                for _ in range(args.rounds):
                    empty = asyncio.run(bench_empty(empty_port, empty_process.pid, share, concurrency))
                    pairs = asyncio.run(
                        bench_control_plane(plane_port, plane_process.pid, tenant_token, share, concurrency)
                    )
                    rounds[concurrency].append((empty, pairs))
        finally:
            empty_process.kill()
            plane_process.kill()
    return rounds


def print_rates(rounds: Rounds, backend: str) -> dict[int, tuple[Measured, Measured]]:
    """The rates table and the goal's verdict; return the totals over the rounds per concurrency."""
    print(
        f"{'in flight':>9}  {'empty calls/s':>13}  {'create+cancel/s':>15}  {'RPCs/s':>7}  {'creates / empty':>15}"
        f"  {'range over rounds':>17}"
    )
    totals: dict[int, tuple[Measured, Measured]] = {}
    for concurrency, measured in rounds.items():
        e, p = sum((m[0] for m in measured[1:]), measured[0][0]), sum((m[1] for m in measured[1:]), measured[0][1])
        totals[concurrency] = (e, p)
        ratios = [pair.rate / empty.rate for empty, pair in measured]
        spread = f"{min(ratios):.1%} - {max(ratios):.1%}"
        print(
            f"{concurrency:>9}  {e.rate:>13.0f}  {p.rate:>15.0f}  {2 * p.rate:>7.0f}  {p.rate / e.rate:>15.1%}"
            f"  {spread:>17}"
        )
    judged = max(totals)
    e, p = totals[judged]
    if backend != "sqlite":
        print(f"goal: creates / empty >= {GOAL:.0%} on SQLite (not judged on {backend})")
    else:
        verdict = "met" if p.rate / e.rate >= GOAL else "NOT met"
        print(f"goal: creates / empty >= {GOAL:.0%} at the most in flight ({judged}): {p.rate / e.rate:.1%}, {verdict}")
    if min(totals) < 64:
        print("(below 64 in flight the pairs' rate is the latency of two durable commits, not a throughput)")
    return totals


def print_cpu(totals: dict[int, tuple[Measured, Measured]]) -> None:
    """CPU per call of both servers and of the client: steadier than the rates on a shared machine."""
    print("CPU in ms: server event-loop thread / whole server process; client (this process)")
    print("(steadier than rates on a shared machine):")
    print(
        f"{'in flight':>9}  {'per empty call':>15}  {'per create+cancel':>17}  {'empty / pair (loop)':>19}"
        f"  {'client: empty':>13}  {'client: pair':>12}  {'empty / pair (all)':>18}"
    )
    for concurrency, (e, p) in totals.items():
        client = f"  {1e3 * e.client / e.calls:>13.3f}  {1e3 * p.client / p.calls:>12.3f}"
        e_main, e_process = e.per_call(e.server_main), e.per_call(e.server_process)
        p_main, p_process = p.per_call(p.server_main), p.per_call(p.server_process)
        if e_main is None or e_process is None or p_main is None or p_process is None:
            print(f"{concurrency:>9}  {'n/a':>15}  {'n/a':>17}  {'n/a':>19}{client}  {'n/a':>18}")
            continue
        # Client and server CPU together, per empty call over per pair: the ratio the rates
        # would reach if the pairs kept every core as busy as the empty calls do. The loop
        # column is the ratio if the loop thread alone were the limit; the lower of the two binds.
        machine = (e_process + e.client / e.calls) / (p_process + p.client / p.calls)
        print(
            f"{concurrency:>9}  {1e3 * e_main:>7.3f} / {1e3 * e_process:<5.3f}  "
            f"{1e3 * p_main:>8.3f} / {1e3 * p_process:<6.3f}  {e_main / p_main:>19.1%}{client}  {machine:>18.1%}"
        )


def main() -> None:
    """Parse the arguments, measure, print the rates and the CPU per call."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=16.0, help="per measurement")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 64], help="calls in flight")
    parser.add_argument(
        "--rounds", type=int, default=8, help="alternating rounds the seconds are split into, empty then pairs"
    )
    parser.add_argument("--nodes", type=int, default=256, help="fleet size (must exceed the concurrency)")
    parser.add_argument("--database-url", default=os.environ.get("GPUCLOUD_DATABASE_URL"))
    parser.add_argument(
        "--no-database",
        action="store_true",
        help="stub the allocation commands: the ceiling of the gRPC, auth and client stack alone",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    rounds = measure(args)
    backend = "no database" if args.no_database else "postgresql" if args.database_url else "sqlite"
    print(
        f"machine: {os.cpu_count()} cpus, {args.seconds:.0f} s per measurement in {args.rounds} alternating rounds,"
        f" backend: {backend}"
    )
    totals = print_rates(rounds, backend)
    print()
    print_cpu(totals)


if __name__ == "__main__":
    main()

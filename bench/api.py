"""Throughput of CreateAllocation+CancelAllocation through the real client, against an empty
unary grpc.aio call measured in the same run on the same machine.

    uv run python bench/api.py [--seconds 8] [--concurrency 8 64] [--database-url URL]

Each server runs in its own process (spawned, so no gRPC state crosses a fork); the load runs
in this process through ``clients.AsyncClient``. Both are measured at each concurrency (calls
in flight): 8, where a create's latency bounds the rate, and 64, where both servers are
saturated and the rates compare the CPU each call costs. The figure that matters is the
ratio, since machines here are shared and noisy: the goal is creates/s >= 25% of empty
calls/s on SQLite.
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
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "proto")]

EMPTY_METHOD = "/bench.Empty/Ping"


def _identity(data: bytes) -> bytes:
    return data


def _serve_empty(port_queue: mp.Queue[int]) -> None:
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
    from services.ids import new_id
    from services.operations.repository import Operation

    def view(allocation_id: str, state: str) -> AllocationView:
        return AllocationView(Allocation(allocation_id, "bench", "H100", 1, state, created_us=1), ("bench-0000",))

    async def create(store: object, request: object) -> AllocationView:
        return view(new_id("alloc"), "ACTIVE")

    async def cancel(store: object, principal: object, allocation_id: str) -> tuple[Operation, AllocationView]:
        operation = Operation("op-bench", "bench", "x", allocation_id, False, None, 2, None)
        return operation, view(allocation_id, "CANCELLING")

    commands.create = create  # type: ignore[assignment]  # a stand-in with the same call shape
    commands.cancel = cancel  # type: ignore[assignment]


def _serve_control_plane(data_dir: str, database_url: str | None, no_database: bool, port_queue: mp.Queue[int]) -> None:
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
        assert plane.port is not None
        port_queue.put(plane.port)
        await plane.wait()

    asyncio.run(main())


async def _drive(seconds: float, concurrency: int, one: Callable[[], Awaitable[None]]) -> float:
    """Run ``one`` in ``concurrency`` loops for ``seconds``; return completed calls per second."""
    done = 0
    stop_at = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            await one()
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    return done / (time.perf_counter() - started)


async def bench_empty(port: int, seconds: float, concurrency: int) -> float:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        ping = channel.unary_unary(EMPTY_METHOD, request_serializer=_identity, response_deserializer=_identity)

        async def one() -> None:
            await ping(b"", timeout=10)

        await _drive(0.5, concurrency, one)  # warm-up
        return await _drive(seconds, concurrency, one)


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


async def bench_control_plane(port: int, tenant_token: str, seconds: float, concurrency: int) -> float:
    """Create+cancel pairs per second through the real client."""
    from clients import AsyncClient, ResourceExhaustedError

    async with AsyncClient(f"127.0.0.1:{port}", tenant_token) as tenant:

        async def one() -> None:
            while True:
                try:
                    allocation = await tenant.create_allocation(gpu_model="H100", node_count=1)
                    break
                except ResourceExhaustedError:
                    # Every node is still scrubbing: real clients back off the same way.
                    await asyncio.sleep(0.01)
            await tenant.cancel_allocation(allocation.allocation_id)

        await _drive(0.5, concurrency, one)  # warm-up
        return await _drive(seconds, concurrency, one)


def _start(target: Callable[..., None], *args: object) -> tuple[mp.process.BaseProcess, int]:
    ctx = mp.get_context("spawn")
    queue: mp.Queue[int] = ctx.Queue()
    process = ctx.Process(target=target, args=(*args, queue), daemon=True)
    process.start()
    return process, queue.get(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="per measurement")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 64], help="calls in flight")
    parser.add_argument("--nodes", type=int, default=256, help="fleet size (must exceed the concurrency)")
    parser.add_argument("--database-url", default=os.environ.get("GPUCLOUD_DATABASE_URL"))
    parser.add_argument(
        "--no-database",
        action="store_true",
        help="stub the allocation commands: the ceiling of the gRPC, auth and client stack alone",
    )
    args = parser.parse_args()

    empty_process, empty_port = _start(_serve_empty)
    try:
        empty_rates = [asyncio.run(bench_empty(empty_port, args.seconds, c)) for c in args.concurrency]
    finally:
        empty_process.kill()

    with tempfile.TemporaryDirectory(prefix="gpucloud-bench-") as data_dir:
        plane_process, plane_port = _start(_serve_control_plane, data_dir, args.database_url, args.no_database)
        try:
            token = (Path(data_dir) / "operator.token").read_text().strip()
            tenant_token = asyncio.run(register_fleet(plane_port, token, args.nodes))
            pair_rates = [
                asyncio.run(bench_control_plane(plane_port, tenant_token, args.seconds, c)) for c in args.concurrency
            ]
        finally:
            plane_process.kill()

    backend = "no database" if args.no_database else "postgresql" if args.database_url else "sqlite"
    print(f"machine: {os.cpu_count()} cpus, {args.seconds:.0f} s per measurement, backend: {backend}")
    print(f"{'in flight':>9}  {'empty calls/s':>13}  {'create+cancel/s':>15}  {'RPCs/s':>7}  {'creates / empty':>15}")
    for concurrency, empty_rate, pair_rate in zip(args.concurrency, empty_rates, pair_rates, strict=True):
        print(
            f"{concurrency:>9}  {empty_rate:>13.0f}  {pair_rate:>15.0f}  {2 * pair_rate:>7.0f}  "
            f"{pair_rate / empty_rate:>15.1%}"
        )
    print("goal: creates / empty >= 25%")


if __name__ == "__main__":
    main()

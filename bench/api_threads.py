"""Where the servers' CPU goes, thread by thread: the diagnostic behind bench/api.py's CPU table.

    uv run python bench/api_threads.py [--seconds 6] [--rounds 2] [--concurrency 64]

Starts the same two servers as ``bench/api.py`` (an empty grpc.aio handler, and the control
plane on a fresh SQLite file with 256 READY nodes), drives each in turn from this process, and
prints for every server thread its user and system CPU and its voluntary and involuntary
context switches per call (empty) or per create+cancel pair, from ``/proc/<pid>/task`` (Linux
only). The event loop is the thread marked ``*``; the other ``python`` threads are gRPC's
completion-queue poller and, in the control plane, the SQLite writer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import grpc

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import api  # noqa: E402  (bench/api.py, beside this file)

TICKS = os.sysconf("SC_CLK_TCK")
# Per thread id: (name, user ticks, system ticks, voluntary switches, involuntary switches).
Snapshot = dict[str, tuple[str, int, int, int, int]]


def snapshot(pid: int) -> Snapshot:
    """Every thread's CPU ticks and context switches so far."""
    threads: Snapshot = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue  # the thread ended
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        switches = {k: int(v) for k, _, v in (line.partition(":") for line in status.splitlines()) if "ctxt" in k}
        threads[tid] = (
            name,
            int(fields[11]),
            int(fields[12]),
            switches["voluntary_ctxt_switches"],
            switches["nonvoluntary_ctxt_switches"],
        )
    return threads


def report(title: str, pid: int, before: Snapshot, after: Snapshot, units: int, seconds: float) -> None:
    print(f"{title}: {units / seconds:,.0f}/s; per unit:")
    rows = []
    for tid, (name, user, system, voluntary, involuntary) in after.items():
        _, user0, system0, voluntary0, involuntary0 = before.get(tid, (name, 0, 0, 0, 0))
        delta = (user - user0, system - system0, voluntary - voluntary0, involuntary - involuntary0)
        if any(delta):
            rows.append((name + ("*" if tid == str(pid) else ""), *delta))
    print(f"  {'thread':<18}{'user us':>10}{'sys us':>10}{'voluntary':>11}{'involuntary':>13}")
    for name, user, system, voluntary, involuntary in sorted(rows, key=lambda r: -(r[1] + r[2])):
        per = 1e6 / TICKS / units
        cpu = f"{user * per:>10.1f}{system * per:>10.1f}"
        print(f"  {name:<18}{cpu}{voluntary / units:>11.2f}{involuntary / units:>13.2f}")


async def measure(title: str, pid: int, one: Callable[[], Awaitable[None]], seconds: float, concurrency: int) -> None:
    done = 0
    stop_at = 0.0

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            await one()
            done += 1

    stop_at = time.perf_counter() + 0.5
    await asyncio.gather(*(loop() for _ in range(concurrency)))  # warm-up, not counted
    done = 0
    before, started = snapshot(pid), time.perf_counter()
    stop_at = started + seconds
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    elapsed, after = time.perf_counter() - started, snapshot(pid)
    report(title, pid, before, after, max(done, 1), elapsed)


async def empty_calls(port: int, pid: int, seconds: float, concurrency: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        ping = channel.unary_unary(
            api.EMPTY_METHOD, request_serializer=api._identity, response_deserializer=api._identity
        )

        async def one() -> None:
            await ping(b"", timeout=10)

        await measure("empty calls", pid, one, seconds, concurrency)


async def pairs(port: int, pid: int, token: str, seconds: float, concurrency: int) -> None:
    from clients import AsyncClient

    async with AsyncClient(f"127.0.0.1:{port}", token) as tenant:
        await measure("create+cancel pairs", pid, partial(api.create_and_cancel, tenant), seconds, concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds, empty calls then pairs")
    parser.add_argument("--concurrency", type=int, default=64, help="calls in flight")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpucloud-bench-") as data_dir:
        empty_process, empty_port = api._start(api._serve_empty)
        plane_process, plane_port = api._start(api._serve_control_plane, data_dir, None, False)
        try:
            assert empty_process.pid is not None
            assert plane_process.pid is not None
            operator = (Path(data_dir) / "operator.token").read_text().strip()
            token = asyncio.run(api.register_fleet(plane_port, operator, 256))
            for _ in range(args.rounds):
                asyncio.run(empty_calls(empty_port, empty_process.pid, args.seconds, args.concurrency))
                asyncio.run(pairs(plane_port, plane_process.pid, token, args.seconds, args.concurrency))
        finally:
            empty_process.kill()
            plane_process.kill()


if __name__ == "__main__":
    main()

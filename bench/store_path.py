"""Where a create's time goes: the store path without gRPC, against raw sqlite3.

    uv run python bench/store_path.py

Prints, on one SQLite file each: a raw sqlite3 one-row commit; one statement and one empty
read transaction through SQLAlchemy's async engine (aiosqlite), the path reads take; and the
control plane's create / cancel / release commands called in-process, one at a time (so each
pays a whole commit: no group commit).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import structlog
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "proto")]

from services.allocations import commands  # noqa: E402
from services.allocations.releaser import Releaser  # noqa: E402
from services.allocations.requests import AllocationRequest  # noqa: E402
from services.auth.principal import CONTROL_PLANE, Principal, Role  # noqa: E402
from services.nodes import commands as node_commands  # noqa: E402
from services.nodes.inventory import GpuModel, GpuSpec, Inventory  # noqa: E402
from services.notify import Notifier  # noqa: E402
from services.store.engine import Store  # noqa: E402
from services.tenants import commands as tenant_commands  # noqa: E402

ROUNDS = 60


def raw_sqlite_commits(path: Path, count: int = 2000) -> float:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")  # as the control plane commits
    connection.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)")
    started = time.perf_counter()
    for _ in range(count):
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("INSERT INTO t (b) VALUES ('x')")
        connection.execute("COMMIT")
    connection.close()
    return count / (time.perf_counter() - started)


async def store_path(path: Path) -> dict[str, float]:
    store = await Store.open(f"sqlite+aiosqlite:///{path}")
    await tenant_commands.create(store, "bench", "bench")
    for i in range(ROUNDS + 4):
        gpus = tuple(GpuSpec(f"GPU-{i}-{g}", g) for g in range(8))
        await node_commands.register(store, CONTROL_PLANE, Inventory(f"n{i}", GpuModel.H100, gpus, "z", "r", "l"))
        await node_commands.complete_burn_in(store, CONTROL_PLANE, f"n{i}", passed=True, detail="")
    tenant = Principal("bench", Role.TENANT, tenant_id="bench")
    releaser = Releaser(store, scrub_seconds=0, wake=Notifier(), done=Notifier())

    results: dict[str, float] = {}
    async with store.read() as session:
        connection = await session.connection()
        started = time.perf_counter()
        for _ in range(500):
            await connection.execute(text("SELECT 1"))
        results["one statement (ms)"] = (time.perf_counter() - started) / 500 * 1000
    started = time.perf_counter()
    for _ in range(200):
        async with store.read() as session:
            await (await session.connection()).execute(text("SELECT 1"))
    results["read transaction with one statement (ms)"] = (time.perf_counter() - started) / 200 * 1000

    create = cancel = release = 0.0
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        view = (await commands.create(store, AllocationRequest("bench", GpuModel.H100, 1, ""))).view
        t1 = time.perf_counter()
        await commands.cancel(store, tenant, view.row.allocation_id)
        t2 = time.perf_counter()
        await releaser.release_due()
        t3 = time.perf_counter()
        create, cancel, release = create + t1 - t0, cancel + t2 - t1, release + t3 - t2
    results["create (ms)"] = create / ROUNDS * 1000
    results["cancel (ms)"] = cancel / ROUNDS * 1000
    results["release of one allocation (ms)"] = release / ROUNDS * 1000
    await store.close()
    return results


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="gpucloud-bench-") as scratch:
        commits = raw_sqlite_commits(Path(scratch) / "raw.db")
        results = asyncio.run(store_path(Path(scratch) / "store.db"))
    print(f"{'raw sqlite3 one-row commit, FULL (ms)':<48}{1000 / commits:>10.3f}")
    for name, value in results.items():
        print(f"{name:<48}{value:>10.3f}")


if __name__ == "__main__":
    main()

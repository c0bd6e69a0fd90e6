"""Where the control plane's SQL time goes under load, statement by statement.

    uv run python bench/api_statements.py [--seconds 10] [--concurrency 64]

Starts the control plane as ``bench/api.py`` does (its own spawned process, a fresh SQLite
file, 256 READY nodes, the releaser with ``scrub_seconds=0``), with the SQLite writer's
statement runner replaced by a timing copy, drives create+cancel pairs from this process for
``--seconds``, then prints for every statement text its count, its mean time and its share of
the total, and for every transaction step the Python time spent between its statements (the
generators' own work: building binds, reading rows). Diagnostic only: the timing adds a few
microseconds a statement, so its rate is not the benchmark's.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import signal
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import api  # noqa: E402  (bench/api.py, beside this file)

# Where the child writes its tallies when told to stop (SIGUSR1).
_REPORT = "report.txt"


class _TimedCursor:
    """A sqlite3 cursor that adds each statement's time (execute and fetch) to ``tallies``."""

    def __init__(self, cursor: sqlite3.Cursor, tallies: defaultdict[str, list[float]], run: list[float]) -> None:
        self._cursor = cursor
        self._tallies = tallies
        self._run = run  # [SQL seconds, statements] of the transaction being driven
        self._tally = [0.0, 0.0]

    def _timed(self, text: str, execute: Any, *args: Any) -> None:
        self._run[1] += 1
        self._tally = self._tallies[" ".join(text.split())[:100]]
        started = time.perf_counter()
        try:
            execute(text, *args)
        finally:
            self._add(time.perf_counter() - started, count=1)

    def _add(self, seconds: float, *, count: int = 0) -> None:
        self._tally[0] += count
        self._tally[1] += seconds
        self._run[0] += seconds

    def execute(self, text: str, params: Any) -> None:
        self._timed(text, self._cursor.execute, params)

    def executemany(self, text: str, rows: Any) -> None:
        self._timed(text, self._cursor.executemany, rows)

    def fetchall(self) -> list[Any]:
        started = time.perf_counter()
        rows = self._cursor.fetchall()
        self._add(time.perf_counter() - started)
        return rows

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    def close(self) -> None:
        self._cursor.close()


class _TimedConnection:
    """What the writer's statement runner is handed: cursors that time their statements."""

    def __init__(self, connection: sqlite3.Connection, tallies: defaultdict[str, list[float]]) -> None:
        self._connection = connection
        self._tallies = tallies
        self.run = [0.0, 0.0]

    def cursor(self) -> _TimedCursor:
        return _TimedCursor(self._connection.cursor(), self._tallies, self.run)


def _serve_timed(data_dir: str, port_queue: mp.Queue[int]) -> None:
    """The control plane of ``bench/api.py`` with every writer statement timed."""
    import services.store.writer as writer
    from services.store.tx import Tx

    statements: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    # Per transaction step: runs, seconds outside its statements, statements.
    steps: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0])
    run_on_connection = writer.run_on_connection

    def timed_run_on_connection(connection: sqlite3.Connection, tx: Tx[Any]) -> Any:
        step = getattr(getattr(tx, "gi_code", None), "co_name", "?")
        timed = _TimedConnection(connection, statements)
        started = time.perf_counter()
        try:
            return run_on_connection(timed, tx)  # duck-typed: a cursor factory is all it uses
        finally:
            tally = steps[step]
            tally[0] += 1
            tally[1] += time.perf_counter() - started - timed.run[0]
            tally[2] += timed.run[1]

    writer.run_on_connection = timed_run_on_connection
    overhead = _wrapper_overhead()

    def report(*_: object) -> None:
        total = sum(t for _, t in statements.values())
        lines = [f"{'calls':>8} {'mean us':>9} {'share':>6}  statement"]
        for text, (count, seconds) in sorted(statements.items(), key=lambda kv: -kv[1][1]):
            lines.append(f"{int(count):>8} {seconds / count * 1e6:>9.1f} {seconds / total:>6.1%}  {text}")
        lines.append(f"all statements: {total:.3f} s")
        lines.append(
            f"{'runs':>8} {'mean us':>9}  Python between statements, by transaction step"
            f" (less the timing wrapper's {overhead * 1e6:.1f} us a statement)"
        )
        for step, (runs, seconds, count) in sorted(steps.items(), key=lambda kv: -kv[1][1]):
            python = (seconds - count * overhead) / runs
            lines.append(f"{int(runs):>8} {python * 1e6:>9.1f}  {step}")
        Path(data_dir, _REPORT).write_text("\n".join(lines) + "\n")
        os._exit(0)

    signal.signal(signal.SIGUSR1, report)
    api._serve_control_plane(data_dir, None, False, port_queue)


def _wrapper_overhead(rounds: int = 5000) -> float:
    """Seconds ``_TimedCursor`` adds to a statement in all: a trivial statement run through it
    and directly, on a scratch in-memory database. Subtracted from the steps' Python time."""
    connection = sqlite3.connect(":memory:")

    def run(cursor: Any) -> float:
        started = time.perf_counter()
        for _ in range(rounds):
            cursor.execute("SELECT 1", ())
            if cursor.description:
                cursor.fetchall()
        return time.perf_counter() - started

    def timed() -> _TimedCursor:
        return _TimedConnection(connection, defaultdict(lambda: [0, 0.0])).cursor()

    run(connection.cursor()), run(timed())  # warm-up
    added = min(run(timed()) - run(connection.cursor()) for _ in range(3))
    connection.close()
    return max(0.0, added / rounds)


async def _pairs(port: int, token: str, seconds: float, concurrency: int) -> int:
    from clients import AsyncClient

    done = 0
    async with AsyncClient(f"127.0.0.1:{port}", token) as tenant:
        stop_at = time.perf_counter() + seconds

        async def loop() -> None:
            nonlocal done
            while time.perf_counter() < stop_at:
                await api.create_and_cancel(tenant)
                done += 1

        await asyncio.gather(*(loop() for _ in range(concurrency)))
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=64, help="calls in flight")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpucloud-bench-") as data_dir:
        process, port = api._start(_serve_timed, data_dir)
        try:
            operator = (Path(data_dir) / "operator.token").read_text().strip()
            token = asyncio.run(api.register_fleet(port, operator, 256))
            pairs = asyncio.run(_pairs(port, token, args.seconds, args.concurrency))
            time.sleep(1.0)  # the releaser's last batch
            assert process.pid is not None
            os.kill(process.pid, signal.SIGUSR1)
            process.join(30)
            print(f"{pairs} create+cancel pairs in {args.seconds:.0f} s at {args.concurrency} in flight (timed)")
            print(Path(data_dir, _REPORT).read_text(), end="")
        finally:
            if process.is_alive():
                process.kill()


if __name__ == "__main__":
    main()

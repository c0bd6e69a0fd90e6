"""Per-GPU union of a month of usage intervals: the DuckDB engine against the pure-Python
reference and a numpy baseline, on the same data in the same run.

    uv run python bench/accounting.py [--intervals 10000000 | --quick] [--variants] [--rounds 2]
    uv run python bench/accounting.py --invoice [--events 1000000 | --quick]

The data (bench/_intervals_numpy.py) is a 10,000-GPU fleet over 30 days, seeded: base usage
plus ~5% overlapping re-reports and ~2% exact duplicate rows, in log order. Each method runs in
its own subprocess that reads the same .npy files, so its peak memory is its own: the figure is
the growth of ``ru_maxrss`` over the worker's state after it imported every library and read the
input (DuckDB allocates outside Python's heap, so tracemalloc would miss it). Loading (numpy
rows into Interval objects, Arrow into a DuckDB table for the variants that use one) is timed
apart from the query. The engine row is the product code: ``accounting.engine.union_seconds``
and ``intersection_seconds`` called on an Arrow table, everything they do counted. Every
method's per-GPU totals must equal the numpy baseline's exactly.

Goal: the engine's union >= 5x faster than the pure-Python reference and within 2x of numpy.
``--variants`` also times alternative DuckDB SQL formulations, to choose from. Machines here
are shared 2-core VMs: compare the ratios, not the seconds. Each figure is the least over
``--rounds`` interleaved runs (the pure-Python reference runs in the first only), and CPU
seconds are printed next to wall seconds: DuckDB uses both cores, the others use one.

``--invoice`` times ``accounting.invoice.compute_invoices`` (events -> invoices) with each
engine, each in its own process, on a seeded log from bench/_usage_events.py, and checks that
both give the same invoices, reconciliation and anomalies.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, bench/ comes first on sys.path, where this file would hide the accounting package.
sys.path[:0] = [str(ROOT)]

from bench._intervals_numpy import (  # noqa: E402  (needs the path above)
    I64,
    Intervals,
    credit_per_gpu,
    generate,
    generate_outages,
    union_per_gpu,
)

# ---------------------------------------------------------------------------------------------
# What each method does: it gets the usage and outage columns and returns what it measured.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timed:
    """Wall and CPU seconds (CPU: every thread of the process, so DuckDB's workers count)."""

    wall_s: float
    cpu_s: float


@dataclass(frozen=True)
class Measured:
    load: Timed
    union: Timed
    covered: I64  # per-GPU union µs, index = gpu
    credit: Timed | None = None
    credited: I64 | None = None  # per-GPU µs of usage inside outages


def _best_of(repeat: int, run: Callable[[], I64]) -> tuple[Timed, I64]:
    """The least disturbed of ``repeat`` runs (least wall, least CPU), and the answer."""
    wall, cpu, answer = float("inf"), float("inf"), np.zeros(0, dtype=np.int64)
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        answer = run()
        wall = min(wall, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - started_cpu)
    return Timed(wall, cpu), answer


def _once(run: Callable[[], object]) -> Timed:
    started, started_cpu = time.perf_counter(), time.process_time()
    run()
    return Timed(time.perf_counter() - started, time.process_time() - started_cpu)


NO_LOAD = Timed(0.0, 0.0)


def _method_numpy(usage: Intervals, outages: Intervals, repeat: int) -> Measured:
    union, covered = _best_of(repeat, lambda: union_per_gpu(usage))
    credit, credited = _best_of(repeat, lambda: credit_per_gpu(usage, outages))
    return Measured(NO_LOAD, union, covered, credit, credited)


def _method_python(usage: Intervals, outages: Intervals, repeat: int) -> Measured:
    from accounting.intervals import Interval, intersect, total

    by_gpu: dict[int, list[Interval]] = {}
    down: dict[int, list[Interval]] = {}

    def load() -> None:
        for gpu, start, end in zip(usage.gpu.tolist(), usage.start.tolist(), usage.end.tolist(), strict=True):
            by_gpu.setdefault(gpu, []).append(Interval(start, end))
        for gpu, start, end in zip(outages.gpu.tolist(), outages.start.tolist(), outages.end.tolist(), strict=True):
            down.setdefault(gpu, []).append(Interval(start, end))

    loaded = _once(load)

    def union() -> I64:
        covered = np.zeros(usage.gpus, dtype=np.int64)
        for gpu, intervals in by_gpu.items():
            covered[gpu] = total(intervals)
        return covered

    def credits() -> I64:
        credit = np.zeros(usage.gpus, dtype=np.int64)
        for gpu, cuts in down.items():
            credit[gpu] = sum(i.length for i in intersect(by_gpu.get(gpu, []), cuts))
        return credit

    timed, covered = _best_of(repeat, union)
    credit, credited = _best_of(repeat, credits)
    return Measured(loaded, timed, covered, credit, credited)


# DuckDB formulations. ``{src}`` is a relation with columns gpu, start_us, end_us; those that
# need a unique tiebreaker use rowid, so they run on a table, as the engine does.
#
# "gain": in start order, a row adds max(0, end - max(start, reach)) of new coverage, where
# reach is the largest end among the rows before it on the same GPU. One window, one sort, and
# the sum is the same whatever order equal starts get, so no tiebreaker is needed.
SQL_GAIN = """
SELECT gpu, SUM(GREATEST(end_us - GREATEST(start_us, COALESCE(reach, start_us)), 0))::BIGINT AS covered_us
FROM (SELECT gpu, start_us, end_us,
             MAX(end_us) OVER (PARTITION BY gpu ORDER BY start_us
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
      FROM {src})
GROUP BY gpu
"""

# The same scan on one packed key (gpu << shift | time) and no PARTITION BY: every end of one GPU
# stays below every start of the next, so the running max never leaks from one GPU to the next.
SQL_GAIN_PACKED = """
SELECT (sk >> {shift}) AS gpu, SUM(GREATEST(ek - GREATEST(sk, COALESCE(reach, sk)), 0))::BIGINT AS covered_us
FROM (SELECT sk, ek, MAX(ek) OVER (ORDER BY sk ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
      FROM (SELECT (gpu << {shift}) | start_us AS sk, (gpu << {shift}) | end_us AS ek FROM {src}))
GROUP BY 1
"""

# The packed scan with a unique tiebreaker, as the engine runs it: ``rid`` is a row-number column
# of the Arrow table, so the query still scans Arrow directly (rowid would need a real table).
SQL_GAIN_PACKED_TIEBREAK = """
SELECT (sk >> {shift}) AS gpu, SUM(GREATEST(ek - GREATEST(sk, COALESCE(reach, sk)), 0))::BIGINT AS covered_us
FROM (SELECT sk, ek, MAX(ek) OVER (ORDER BY sk, rid ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
      FROM (SELECT (gpu << {shift}) | start_us AS sk, (gpu << {shift}) | end_us AS ek, rid FROM {src}))
GROUP BY 1
"""

# The packed scan when GPUs are named by strings (as gpu_uuid is): number the distinct GPUs in
# a small table first (any numbering will do), hash-join it in, and join the names back at the end.
SQL_GAIN_PACKED_NAMED = """
WITH ids AS (SELECT gpu, (row_number() OVER () - 1)::BIGINT AS gid FROM (SELECT DISTINCT gpu FROM {src})),
     gains AS (
         SELECT (sk >> {shift}) AS gid, SUM(GREATEST(ek - GREATEST(sk, COALESCE(reach, sk)), 0))::BIGINT AS covered_us
         FROM (SELECT sk, ek, MAX(ek) OVER (ORDER BY sk ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
               FROM (SELECT (gid << {shift}) | start_us AS sk, (gid << {shift}) | end_us AS ek
                     FROM {src} JOIN ids USING (gpu)))
         GROUP BY 1)
SELECT ids.gpu, gains.covered_us FROM gains JOIN ids USING (gid)
"""

# Gaps and islands: number the islands of overlapping rows, then sum each island's span. It
# needs a unique order (rowid as the tiebreaker) so that equal starts number the same way each run.
SQL_ISLANDS = """
WITH o AS (SELECT gpu, rowid AS rid, start_us, end_us,
                  MAX(end_us) OVER (PARTITION BY gpu ORDER BY start_us, end_us, rid
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
           FROM {src}),
     f AS (SELECT *, SUM(CASE WHEN reach IS NULL OR start_us > reach THEN 1 ELSE 0 END)
                     OVER (PARTITION BY gpu ORDER BY start_us, end_us, rid ROWS UNBOUNDED PRECEDING) AS island
           FROM o)
SELECT gpu, SUM(e - s)::BIGINT AS covered_us
FROM (SELECT gpu, island, MIN(start_us) AS s, MAX(end_us) AS e FROM f GROUP BY ALL)
GROUP BY gpu
"""

# An event sweep: +1 at each start, -1 at each end, covered where the count is >= 1.
SQL_SWEEP = """
WITH ev AS (SELECT gpu, start_us AS t, 1 AS d FROM {src} UNION ALL SELECT gpu, end_us, -1 FROM {src}),
     c AS (SELECT gpu, t, SUM(d) OVER w AS cnt, LEAD(t) OVER w AS t_next FROM ev
           WINDOW w AS (PARTITION BY gpu ORDER BY t, d ROWS UNBOUNDED PRECEDING))
SELECT gpu, SUM(CASE WHEN cnt >= 1 THEN t_next - t ELSE 0 END)::BIGINT AS covered_us
FROM c WHERE t_next IS NOT NULL GROUP BY gpu
"""


def _sql_credit(gain: str) -> str:
    """|U(usage) ∩ U(outages)| per GPU as U(a) + U(b) - U(a and b together), on the GPUs with an outage."""
    return f"""
WITH hit AS (SELECT gpu, start_us, end_us FROM iv WHERE gpu IN (SELECT gpu FROM ov)),
     both_ AS (SELECT * FROM hit UNION ALL SELECT gpu, start_us, end_us FROM ov)
SELECT gpu, (COALESCE(a.covered_us, 0) + b.covered_us - c.covered_us)::BIGINT AS covered_us
FROM ({gain.format(src="ov")}) b
LEFT JOIN ({gain.format(src="hit")}) a USING (gpu)
JOIN ({gain.format(src="both_")}) c USING (gpu)
"""


@dataclass(frozen=True)
class SqlVariant:
    """One DuckDB formulation: how the table is loaded, the query, the connection's settings."""

    query: str
    threads: int | None = None
    presorted: bool = False
    over_arrow: bool = False  # query the registered Arrow table directly, no CREATE TABLE
    varchar_gpu: bool = False  # gpu as a 'GPU-000042' string, as uuids are in the event log
    credit: bool = False
    row_numbers: bool = False  # a ``rid`` column 0 .. n-1 in the Arrow table


VARIANTS: dict[str, SqlVariant] = {
    "sql-gain": SqlVariant(SQL_GAIN, credit=True),
    "sql-gain-tiebreak": SqlVariant(SQL_GAIN.replace("ORDER BY start_us", "ORDER BY start_us, end_us, rowid")),
    "sql-gain-packed": SqlVariant(SQL_GAIN_PACKED),
    "sql-islands-rid": SqlVariant(SQL_ISLANDS),
    "sql-sweep": SqlVariant(SQL_SWEEP),
    "sql-gain-presorted": SqlVariant(SQL_GAIN, presorted=True),
    "sql-gain-threads1": SqlVariant(SQL_GAIN, threads=1),
    "sql-gain-packed-threads1": SqlVariant(SQL_GAIN_PACKED, threads=1),
    "sql-gain-over-arrow": SqlVariant(SQL_GAIN, over_arrow=True),
    "sql-gain-packed-over-arrow": SqlVariant(SQL_GAIN_PACKED, over_arrow=True),
    "sql-gain-packed-tiebreak": SqlVariant(SQL_GAIN_PACKED_TIEBREAK, over_arrow=True, row_numbers=True),
    "sql-gain-varchar": SqlVariant(SQL_GAIN, varchar_gpu=True),
    "sql-gain-packed-varchar": SqlVariant(SQL_GAIN_PACKED_NAMED, varchar_gpu=True),
}


def _arrow_table(data: Intervals, varchar_gpu: bool = False, row_numbers: bool = False) -> Any:
    import pyarrow as pa

    columns: dict[str, Any] = {"gpu": data.gpu, "start_us": data.start, "end_us": data.end}
    if row_numbers:
        columns["rid"] = np.arange(len(data), dtype=np.int64)
    if varchar_gpu:
        names = pa.array([f"GPU-{i:06d}" for i in range(data.gpus)])
        columns["gpu"] = pa.DictionaryArray.from_arrays(pa.array(data.gpu.astype(np.int32)), names)
    return pa.table(columns)


def _per_gpu(rows: dict[str, Any], gpus: int, varchar_gpu: bool = False) -> I64:
    out = np.zeros(gpus, dtype=np.int64)
    gpu = rows["gpu"]
    index = np.array([int(g[4:]) for g in gpu]) if varchar_gpu else np.asarray(gpu, dtype=np.int64)
    out[index] = np.asarray(rows["covered_us"], dtype=np.int64)
    return out


def _method_sql(variant: SqlVariant) -> Callable[[Intervals, Intervals, int], Measured]:
    def run(usage: Intervals, outages: Intervals, repeat: int) -> Measured:
        import duckdb

        con = duckdb.connect()
        if variant.threads is not None:
            con.execute(f"SET threads = {variant.threads}")
        shift = max(int(usage.end.max()), 1).bit_length()
        src = "usage_arrow" if variant.over_arrow else "iv"

        def load() -> None:
            con.register("usage_arrow", _arrow_table(usage, variant.varchar_gpu, variant.row_numbers))
            if not variant.over_arrow:
                order = " ORDER BY gpu, start_us" if variant.presorted else ""
                con.execute(f"CREATE TABLE iv AS SELECT * FROM usage_arrow{order}")

        loaded = _once(load)
        query = variant.query.format(src=src, shift=shift)
        union, covered = _best_of(
            repeat, lambda: _per_gpu(con.execute(query).fetchnumpy(), usage.gpus, variant.varchar_gpu)
        )
        credit, credited = None, None
        if variant.credit:
            con.register("ov_arrow", _arrow_table(outages))
            con.execute("CREATE TABLE ov AS SELECT * FROM ov_arrow")
            credit_query = _sql_credit(variant.query)
            credit, credited = _best_of(repeat, lambda: _per_gpu(con.execute(credit_query).fetchnumpy(), usage.gpus))
        con.close()
        return Measured(loaded, union, covered, credit, credited)

    return run


def _method_engine(usage: Intervals, outages: Intervals, repeat: int) -> Measured:
    """The product code as callers run it: ``accounting.engine.union_seconds`` on an Arrow table
    of the columns (its *load* is only wrapping the numpy columns in Arrow, zero-copy: numbering
    the GPUs, registering the table and the query are all inside the call), and
    ``intersection_seconds`` for the credit."""
    import pyarrow as pa

    from accounting import engine

    def per_gpu(result: pa.Table, column: str) -> I64:
        out = np.zeros(usage.gpus, dtype=np.int64)
        out[result.column("gpu_id").to_numpy()] = result.column(column).to_numpy()
        return out

    tables: dict[str, pa.Table] = {}

    def load() -> None:
        for name, data in (("usage", usage), ("outages", outages)):
            tables[name] = pa.table({"gpu_id": data.gpu, "start_us": data.start, "end_us": data.end})

    loaded = _once(load)
    union, covered = _best_of(repeat, lambda: per_gpu(engine.union_seconds(tables["usage"]), "union_us"))
    credit, credited = _best_of(
        repeat,
        lambda: per_gpu(engine.intersection_seconds(tables["usage"], tables["outages"]), "intersection_us"),
    )
    return Measured(loaded, union, covered, credit, credited)


METHODS: dict[str, Callable[[Intervals, Intervals, int], Measured]] = {
    "engine": _method_engine,
    "python": _method_python,
    "numpy": _method_numpy,
    **{name: _method_sql(variant) for name, variant in VARIANTS.items()},
}


# ---------------------------------------------------------------------------------------------
# Subprocess plumbing: the parent writes the data once, each worker reads it and reports back.
# ---------------------------------------------------------------------------------------------


def _save(directory: Path, name: str, data: Intervals) -> None:
    for column in ("gpu", "start", "end"):
        np.save(directory / f"{name}_{column}.npy", getattr(data, column))


def _load(directory: Path, name: str, gpus: int) -> Intervals:
    gpu, start, end = (np.load(directory / f"{name}_{column}.npy") for column in ("gpu", "start", "end"))
    return Intervals(gpu, start, end, gpus)


def _max_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def _worker(method: str, directory: Path, gpus: int, repeat: int, result: Path) -> None:
    # Import everything any method uses first, so the baseline is the same for all of them.
    import duckdb  # noqa: F401
    import pyarrow  # noqa: F401

    import accounting.intervals  # noqa: F401

    usage = _load(directory, "usage", gpus)
    outages = _load(directory, "outages", gpus)
    rss_before = _max_rss_kib()
    measured = METHODS[method](usage, outages, repeat)
    rss_after = _max_rss_kib()
    np.save(result.with_suffix(".covered.npy"), measured.covered)
    if measured.credited is not None:
        np.save(result.with_suffix(".credit.npy"), measured.credited)
    figures = {
        "load": [measured.load.wall_s, measured.load.cpu_s],
        "union": [measured.union.wall_s, measured.union.cpu_s],
        "credit": None if measured.credit is None else [measured.credit.wall_s, measured.credit.cpu_s],
        "rss_base_kib": rss_before,
        "rss_growth_kib": rss_after - rss_before,
    }
    result.write_text(json.dumps(figures))


@dataclass(frozen=True)
class Result:
    """One method's figures: the least of each over the rounds it ran in."""

    method: str
    load: Timed
    union: Timed
    credit: Timed | None
    rss_base_mib: float
    rss_growth_mib: float
    covered: I64
    credited: I64 | None
    rounds: int = 1

    @property
    def load_union_s(self) -> float:
        return self.load.wall_s + self.union.wall_s

    def merge(self, other: Result) -> Result:
        """The least disturbed figures of both runs; answers must not change between runs."""
        if not np.array_equal(self.covered, other.covered):
            raise AssertionError(f"{self.method} gave different answers in two runs")

        def least(a: Timed, b: Timed) -> Timed:
            return Timed(min(a.wall_s, b.wall_s), min(a.cpu_s, b.cpu_s))

        return Result(
            self.method,
            least(self.load, other.load),
            least(self.union, other.union),
            None if self.credit is None or other.credit is None else least(self.credit, other.credit),
            self.rss_base_mib,
            max(self.rss_growth_mib, other.rss_growth_mib),
            self.covered,
            self.credited,
            self.rounds + other.rounds,
        )


def _run_worker(method: str, directory: Path, gpus: int, repeat: int) -> Result:
    result = directory / f"result-{method}.json"
    command = [sys.executable, __file__, "--worker", method, "--data", str(directory), "--gpus", str(gpus)]
    command += ["--repeat", str(repeat)]
    subprocess.run([*command, "--result", str(result)], check=True)
    figures = json.loads(result.read_text())
    credit_path = result.with_suffix(".credit.npy")
    return Result(
        method=method,
        load=Timed(*figures["load"]),
        union=Timed(*figures["union"]),
        credit=None if figures["credit"] is None else Timed(*figures["credit"]),
        rss_base_mib=figures["rss_base_kib"] / 1024,
        rss_growth_mib=figures["rss_growth_kib"] / 1024,
        covered=np.load(result.with_suffix(".covered.npy")),
        credited=np.load(credit_path) if credit_path.exists() else None,
    )


# ---------------------------------------------------------------------------------------------
# Reporting.
# ---------------------------------------------------------------------------------------------


def _agreement(result: Result, truth: Result) -> str:
    wrong = int(np.count_nonzero(result.covered != truth.covered))
    verdict = "yes" if wrong == 0 else f"NO ({wrong} GPUs differ)"
    if result.credited is not None and truth.credited is not None:
        wrong_credit = int(np.count_nonzero(result.credited != truth.credited))
        verdict += ", credit yes" if wrong_credit == 0 else f", credit NO ({wrong_credit})"
    return verdict


def _print_table(results: list[Result], truth: Result) -> None:
    header = (
        f"| {'method':<26} | runs | load s | union s | union CPU s | load+union s | credit s "
        f"| RSS growth MiB | {'union total s':>21} | agrees with numpy |"
    )
    print(header)
    print("|" + "|".join("-" * (len(cell) + 0) for cell in header.split("|")[1:-1]) + "|")
    for r in results:
        credit = f"{r.credit.wall_s:>8.2f}" if r.credit is not None else f"{'-':>8}"
        us = int(r.covered.sum())
        total_s = f"{us // 1_000_000:,}.{us % 1_000_000:06d}"
        print(
            f"| {r.method:<26} | {r.rounds:>4} | {r.load.wall_s:>6.2f} | {r.union.wall_s:>7.2f} "
            f"| {r.union.cpu_s:>11.2f} | {r.load_union_s:>12.2f} | {credit} | {r.rss_growth_mib:>14,.0f} "
            f"| {total_s:>21} | {_agreement(r, truth):<17} |"
        )


def _print_ratios(by_name: dict[str, Result], engine: str) -> None:
    if engine not in by_name:
        return
    e = by_name[engine]
    if "python" in by_name:
        p = by_name["python"]
        print(
            f"python / {engine}: union {p.union.wall_s / e.union.wall_s:.1f}x "
            f"(CPU {p.union.cpu_s / e.union.cpu_s:.1f}x), "
            f"load+union {p.load_union_s / e.load_union_s:.1f}x   (goal >= 5x)"
        )
    n = by_name["numpy"]
    print(
        f"{engine} / numpy: union {e.union.wall_s / n.union.wall_s:.2f}x (CPU {e.union.cpu_s / n.union.cpu_s:.2f}x)"
        f", load+union {e.load_union_s / n.load_union_s:.2f}x   (goal <= 2x)"
    )


def _describe(usage: Intervals, outages: Intervals, covered: I64) -> None:
    rows = np.stack([usage.gpu, usage.start, usage.end], axis=1)
    distinct = len(np.unique(rows, axis=0))
    naive = int((usage.end - usage.start).sum())
    union = int(covered.sum())
    print(
        f"data: {len(usage):,} intervals on {usage.gpus:,} GPUs over 30 days, "
        f"{len(usage) - distinct:,} exact duplicate rows ({(len(usage) - distinct) / len(usage):.1%}); "
        f"{len(outages):,} outage rows on {len(np.unique(outages.gpu)):,} GPUs"
    )
    print(f"naive sum {naive / 1e6:,.0f} s, union {union / 1e6:,.0f} s: naive over-counts by {naive / union - 1:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--intervals", type=int, default=10_000_000)
    parser.add_argument("--quick", action="store_true", help="1M intervals (with --invoice: 100k events)")
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=1, help="time each query this many times, keep the fastest")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every method (but the slow pure-Python one) this many times, interleaved, keep the least",
    )
    parser.add_argument("--variants", action="store_true", help="also time alternative DuckDB formulations")
    parser.add_argument("--only", nargs="*", default=None, help="run just these methods (numpy always runs)")
    parser.add_argument("--skip-python", action="store_true", help="leave out the pure-Python reference")
    parser.add_argument("--invoice", action="store_true", help="time compute_invoices end to end instead")
    parser.add_argument("--events", type=int, default=1_000_000, help="events for --invoice")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker and args.worker.startswith("invoice-"):
        _invoice_worker(args.worker.removeprefix("invoice-"), args.events, args.gpus, args.result)
        return
    if args.worker:
        _worker(args.worker, args.data, args.gpus, args.repeat, args.result)
        return
    if args.invoice:
        _invoice_main(100_000 if args.quick else args.events, args.gpus)
        return

    intervals = 1_000_000 if args.quick else args.intervals
    started = time.perf_counter()
    usage = generate(intervals, gpus=args.gpus)
    outages = generate_outages(gpus=args.gpus)
    generate_s = time.perf_counter() - started

    methods = ["numpy", "engine", *([] if args.skip_python else ["python"])]
    if args.variants:
        methods += list(VARIANTS)
    if args.only is not None:
        methods = ["numpy", *[m for m in args.only if m != "numpy"]]

    print(f"machine: {os.cpu_count()} cpus; generated in {generate_s:.1f} s (seeded)", flush=True)
    by_name: dict[str, Result] = {}
    with tempfile.TemporaryDirectory(prefix="gpucloud-bench-accounting-") as tmp:
        directory = Path(tmp)
        _save(directory, "usage", usage)
        _save(directory, "outages", outages)
        # Rounds interleave the methods, so a neighbour's burst of load on this shared machine
        # hits one round of each rather than every run of one method.
        for round_ in range(args.rounds):
            for method in methods if round_ == 0 else [m for m in methods if m != "python"]:
                try:
                    result = _run_worker(method, directory, args.gpus, args.repeat)
                except subprocess.CalledProcessError:
                    print(f"  round {round_ + 1}: {method} FAILED (its traceback is above)", file=sys.stderr)
                    continue
                print(
                    f"  round {round_ + 1}: {method}: load {result.load.wall_s:.2f} s, "
                    f"union {result.union.wall_s:.2f} s (CPU {result.union.cpu_s:.2f} s)",
                    file=sys.stderr,
                    flush=True,
                )
                by_name[method] = by_name[method].merge(result) if method in by_name else result
    results = list(by_name.values())
    truth = by_name["numpy"]
    _describe(usage, outages, truth.covered)
    print(
        f"memory: growth of ru_maxrss in each method's own process over its state after imports and reading "
        f"the input ({truth.rss_base_mib:,.0f} MiB)"
    )
    _print_table(results, truth)
    _print_ratios(by_name, "engine")
    if args.variants:
        sql = [r for r in results if r.method.startswith("sql-")]
        query = min(sql, key=lambda r: r.union.wall_s)
        whole = min(sql, key=lambda r: r.load_union_s)
        print(f"fastest DuckDB query: {query.method} ({query.union.wall_s:.2f} s)")
        print(f"fastest DuckDB load+query: {whole.method} ({whole.load_union_s:.2f} s)")
        for name in dict.fromkeys([query.method, whole.method]):
            _print_ratios(by_name, name)


# ---------------------------------------------------------------------------------------------
# --invoice: compute_invoices end to end (events -> invoices) with each engine.
# ---------------------------------------------------------------------------------------------


def _invoice_worker(engine: str, events: int, gpus: int, result: Path) -> None:
    import pickle

    import accounting.engine
    import accounting.reference
    from accounting.invoice import compute_invoices
    from bench._usage_events import PERIOD, RATES, generate_events, generate_outages

    log = generate_events(events, gpus)
    outages = generate_outages(gpus)
    rss_before = _max_rss_kib()
    arrow_s = 0.0
    if engine == "duckdb":
        # Included in the total below; timed alone to show what Python objects -> Arrow costs.
        started = time.perf_counter()
        accounting.engine.events_to_arrow(log)
        arrow_s = time.perf_counter() - started
    started = time.perf_counter()
    run = compute_invoices(log, RATES, PERIOD, outages, engine="duckdb" if engine == "duckdb" else "reference")
    total_s = time.perf_counter() - started
    rss_after = _max_rss_kib()
    result.with_suffix(".pickle").write_bytes(pickle.dumps(run))
    figures = {"events": len(log), "arrow_s": arrow_s, "total_s": total_s, "rss_growth_kib": rss_after - rss_before}
    result.write_text(json.dumps(figures))


def _invoice_main(events: int, gpus: int) -> None:
    import pickle
    from collections import Counter

    from accounting.model import InvoiceRun

    print(f"machine: {os.cpu_count()} cpus; compute_invoices on ~{events:,} events, {gpus:,} GPUs", flush=True)
    figures: dict[str, dict[str, Any]] = {}
    runs: dict[str, InvoiceRun] = {}
    with tempfile.TemporaryDirectory(prefix="gpucloud-bench-invoice-") as tmp:
        for engine in ("duckdb", "reference"):
            print(f"  running compute_invoices(engine={engine!r}) ...", file=sys.stderr, flush=True)
            result = Path(tmp) / f"invoice-{engine}.json"
            command = [sys.executable, __file__, "--worker", f"invoice-{engine}", "--events", str(events)]
            subprocess.run([*command, "--gpus", str(gpus), "--result", str(result)], check=True)
            figures[engine] = json.loads(result.read_text())
            runs[engine] = pickle.loads(result.with_suffix(".pickle").read_bytes())

    duck, ref = runs["duckdb"], runs["reference"]
    kinds = Counter(a.kind.value for a in duck.anomalies)
    total = sum((i.total for i in duck.invoices), start=Decimal(0))
    print(
        f"log: {figures['duckdb']['events']:,} events; {len(duck.invoices)} invoices totalling {total:,.2f} "
        f"{duck.currency}; anomalies: {dict(sorted(kinds.items()))}"
    )
    print("memory: growth of ru_maxrss in each engine's own process over its state after generating the log")
    print("| engine    | events -> invoices s | of which events -> Arrow s | RSS growth MiB |")
    print("|-----------|----------------------|----------------------------|----------------|")
    for engine, f in figures.items():
        arrow = f"{f['arrow_s']:>26.2f}" if engine == "duckdb" else f"{'-':>26}"
        print(f"| {engine:<9} | {f['total_s']:>20.2f} | {arrow} | {f['rss_growth_kib'] / 1024:>14,.0f} |")
    print(f"reference / duckdb: {figures['reference']['total_s'] / figures['duckdb']['total_s']:.1f}x")
    same_anomalies = sorted(map(repr, duck.anomalies)) == sorted(map(repr, ref.anomalies))
    print(
        f"agreement: invoices {'equal' if duck.invoices == ref.invoices else 'DIFFER'}, "
        f"reconciliation {'equal' if duck.reconciliation == ref.reconciliation else 'DIFFERS'}, "
        f"anomalies {'equal' if same_anomalies else 'DIFFER'} (as multisets)"
    )


if __name__ == "__main__":
    main()

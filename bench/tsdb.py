"""Our metrics store (tsdb.Store) against DuckDB on the same GPU telemetry, in the same run.

    uv run python bench/tsdb.py                 # 12 nodes x 8 GPUs x 12 fields x 24.1 h at 10 s = 10.0M samples
    uv run python bench/tsdb.py --quick         # a few seconds: 2 nodes x 24.1 h
    uv run python bench/tsdb.py --jitter 25 --json > out.json   # +-25 ms scrape jitter; JSON on stdout

Data comes from ``bench/telemetry.py`` (deterministic in ``--seed``). Both systems get the same
samples; DuckDB gets table ``t(sid INTEGER, ts BIGINT, value DOUBLE)`` loaded through Arrow, once
in arrival order and once sorted by series (its best layout for narrow queries), with
``SET threads`` to the core count. Measured, each where it applies:

- ingest in 96-sample pushes (one node's scrape) with a durable WAL: our ``Store.append`` per push
  with its group-commit fsync, DuckDB one autocommitted 96-row INSERT per push (on a subset of the
  pushes, since it is slow; the output says how many);
- bytes/sample on disk: ours after flushing to 2 h segments and after ``compact()`` to 1-day
  segments (WAL apart), DuckDB's file after CHECKPOINT;
- a narrow query (1 series, 1 h, random windows), a day-aligned AVG per series over all series
  and an unaligned one (start +17 min, end -23 min), both answered by both systems and compared;
- retention of the oldest 2 h (our ``enforce_retention`` against DELETE + CHECKPOINT) and WAL
  replay on reopen after a kill -9 with a head of 1.5 h.

Machines here are noisy shared VMs: the figures to compare are the ratios within one run.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import os
import platform
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import structlog
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, bench/ comes first on sys.path, where this file would hide the tsdb package.
sys.path[:0] = [str(ROOT)]

import tsdb  # noqa: E402  (needs the path above)
from bench.telemetry import DAY_MS, FIELDS, Telemetry, generate  # noqa: E402

HOUR_MS = 3_600_000
SEGMENT_MS = 2 * HOUR_MS
ALL_SERIES = {"field": frozenset(FIELDS)}  # a selector that matches every series
HEAD_HOURS = 1.5  # head replayed on reopen: 1-2 h, as between two flushes of 2 h segments
# A day and 6 minutes (8676 steps, 10.0M samples at 12 nodes): compact() only merges a day once
# the sealed data has passed its end, so a day of data alone would never reach 1-day segments.
DEFAULT_HOURS = 24.1
RETENTION_COPIES = 5
console = Console(stderr=True)


# ---------------------------------------------------------------- helpers


@dataclass
class Figure:
    """One row of the result table: our figure, DuckDB's, their ratio and the goal."""

    metric: str
    ours: str
    duck: str
    ratio: str = ""
    goal: str = ""
    ok: bool | None = None


@dataclass
class Results:
    """Everything measured: table rows plus raw numbers for --json."""

    figures: list[Figure] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, figure: Figure) -> None:
        self.figures.append(figure)


class Profiler:
    """cProfile around named phases when --profile is given; prints the top functions to stderr."""

    def __init__(self, enabled: bool, top: int = 25) -> None:
        self.enabled = enabled
        self.top = top

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        profile = cProfile.Profile()
        profile.enable()
        try:
            yield
        finally:
            profile.disable()
            console.rule(f"profile: {name}")
            stats = pstats.Stats(profile, stream=sys.stderr)
            stats.sort_stats("tottime").print_stats(self.top)


def percentile(samples: list[float], q: float) -> float:
    """q-th percentile (0-100) of samples."""
    return float(np.percentile(np.asarray(samples), q))


def repeat(fn: Callable[[], object], reps: int) -> list[float]:
    """Seconds for each of ``reps`` calls of fn."""
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def ms(seconds: float) -> str:
    """Seconds as milliseconds, 3 significant digits."""
    return f"{seconds * 1000:.3g} ms" if seconds < 0.1 else f"{seconds * 1000:,.0f} ms"


def rate(x: float) -> str:
    """Samples per second, in k/s or M/s."""
    return f"{x / 1e6:.2f}M/s" if x >= 1e6 else f"{x / 1e3:,.1f}k/s"


def files_state(path: Path) -> dict[str, tuple[int, int, int]]:
    """(size, mtime_ns, inode) of every file under path, by relative name."""
    out = {}
    for p in path.rglob("*"):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(path))] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def unlink_floor(work: Path, size: int, reps: int = 5) -> float:
    """Median seconds of the least a durable deletion costs here: unlink one file, fsync its directory."""
    folder = work / "unlink-floor"
    folder.mkdir()
    times = []
    for i in range(reps):
        victim = folder / f"f{i}"
        with victim.open("wb") as f:
            f.write(os.urandom(size))
            f.flush()
            os.fsync(f.fileno())
        os.sync()
        started = time.perf_counter()
        victim.unlink()
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def dir_bytes(path: Path) -> int:
    """Bytes of every file under path."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ---------------------------------------------------------------- windows


@dataclass(frozen=True)
class Windows:
    """The query windows both systems answer."""

    narrow: list[tuple[int, int, int]]  # (series index, start_ms, end_ms)
    day: tuple[int, int]
    unaligned: tuple[int, int]


def make_windows(data: Telemetry, count: int, seed: int) -> Windows:
    """Random 1 h windows (whole seconds) inside the data, the day of its start, and the unaligned window."""
    rng = np.random.default_rng(seed + 1)
    span = data.end_ms - data.start_ms - HOUR_MS
    narrow = [
        (int(rng.integers(data.n_series)), start, start + HOUR_MS)
        for start in (data.start_ms + int(x) * 1000 for x in rng.integers(0, span // 1000, size=count))
    ]
    day_start = data.start_ms - data.start_ms % DAY_MS
    return Windows(
        narrow=narrow,
        day=(day_start, day_start + DAY_MS),
        unaligned=(data.start_ms + 17 * 60_000, data.end_ms - 23 * 60_000),
    )


# ---------------------------------------------------------------- DuckDB


def duck_connect(path: Path, threads: int) -> duckdb.DuckDBPyConnection:
    """A DuckDB file with table t, using ``threads`` threads."""
    con = duckdb.connect(str(path))
    con.execute(f"SET threads = {threads}")
    con.execute("CREATE TABLE IF NOT EXISTS t (sid INTEGER, ts BIGINT, value DOUBLE)")
    return con


def duck_file_bytes(path: Path) -> int:
    """The database file plus its WAL, if one is left."""
    wal = path.with_name(path.name + ".wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def duck_small_ingest(data: Telemetry, path: Path, threads: int, pushes: int) -> tuple[float, int]:
    """Autocommitted 96-row INSERTs (DuckDB fsyncs its WAL on each commit); returns (samples/s, pushes)."""
    con = duck_connect(path, threads)
    steps = range(min(data.steps, max(1, pushes // data.nodes)))
    todo = [(data.node_series(n).astype(np.int32), ts, v) for _, n, ts, v in data.pushes(steps)]
    # The fastest of the 96-row forms tried (Arrow replacement scan, register, executemany, unnest of
    # list parameters): unnest of array parameters, about 3x the Arrow scan and 8x executemany.
    sql = "INSERT INTO t SELECT unnest($1::INTEGER[]), $2::BIGINT, unnest($3::DOUBLE[])"
    started = time.perf_counter()
    for sids, ts, values in todo:
        con.execute(sql, [sids, ts, values])
    elapsed = time.perf_counter() - started
    count = con.execute("SELECT count(*) FROM t").fetchone()
    assert count is not None
    assert count[0] == len(todo) * data.series_per_node
    con.close()
    return len(todo) * data.series_per_node / elapsed, len(todo)


@dataclass
class DuckLayout:
    """One DuckDB database holding the whole data set in one row order."""

    name: str
    path: Path
    con: duckdb.DuckDBPyConnection
    load_s: float
    file_bytes: int


def duck_bulk(data: Telemetry, path: Path, threads: int, order: str) -> DuckLayout:
    """Load every sample through Arrow in one INSERT, in ``order`` ("series-sorted" or "arrival"), then CHECKPOINT."""
    sid, ts, value = data.sorted_columns() if order == "series-sorted" else data.arrival_columns()
    con = duck_connect(path, threads)
    con.register("arrow_rows", pa.table({"sid": sid, "ts": ts, "value": value}))
    started = time.perf_counter()
    con.execute("INSERT INTO t SELECT * FROM arrow_rows")
    con.execute("CHECKPOINT")
    load_s = time.perf_counter() - started
    con.unregister("arrow_rows")
    return DuckLayout(order, path, con, load_s, duck_file_bytes(path))


def duck_narrow(con: duckdb.DuckDBPyConnection, sid: int, start: int, end: int) -> tuple[npt.NDArray[Any], ...]:
    """One series in [start, end): (ts, value) as numpy arrays."""
    # No ORDER BY: both layouts were inserted in time order per series and DuckDB preserves
    # insertion order by default; the sort cost about 1 ms of 2.5. The agreement check compares
    # the timestamps element by element, so a disordered answer would fail the run.
    out = con.execute("SELECT ts, value FROM t WHERE sid = $1 AND ts >= $2 AND ts < $3", [sid, start, end]).fetchnumpy()
    return np.asarray(out["ts"]), np.asarray(out["value"])


def duck_avg(con: duckdb.DuckDBPyConnection, n_series: int, start: int, end: int) -> npt.NDArray[np.float64]:
    """AVG per series over [start, end) with GROUP BY, indexed by sid (NaN where absent)."""
    out = con.execute(
        "SELECT sid, avg(value) AS a FROM t WHERE ts >= $1 AND ts < $2 GROUP BY sid", [start, end]
    ).fetchnumpy()
    result = np.full(n_series, np.nan)
    result[np.asarray(out["sid"])] = np.asarray(out["a"])
    return result


def duck_retention(layout: DuckLayout, cutoff_ms: int) -> dict[str, float]:
    """DELETE every row older than cutoff_ms and CHECKPOINT; time and file size before and after."""
    before = duck_file_bytes(layout.path)
    started = time.perf_counter()
    deleted = layout.con.execute("DELETE FROM t WHERE ts < $1", [cutoff_ms]).fetchone()
    layout.con.execute("CHECKPOINT")
    elapsed = time.perf_counter() - started
    return {
        "seconds": elapsed,
        "rows_deleted": float(deleted[0]) if deleted else float("nan"),
        "bytes_before": before,
        "bytes_after": duck_file_bytes(layout.path),
    }


# ---------------------------------------------------------------- ours


def ours_open(path: Path, **options: Any) -> tsdb.Store:
    """Our store with 2 h segments compacted to 1 day, defaults otherwise (50 ms group commit)."""
    return tsdb.Store.open(path, segment_ms=SEGMENT_MS, compacted_segment_ms=DAY_MS, **options)


def ours_ingest(store: tsdb.Store, data: Telemetry, steps: range | None = None) -> tuple[float, npt.NDArray[np.int64]]:
    """Append every push (one call per node per step) and sync; returns (seconds, our ids by series index)."""
    ids = np.asarray(store.series_ids(data.labels), dtype=np.int64)
    per_node = [ids[data.node_series(n)] for n in range(data.nodes)]
    todo = [(per_node[n], ts, v) for _, n, ts, v in data.pushes(steps)]
    append = store.append
    started = time.perf_counter()
    for sids, ts, values in todo:
        append(sids, ts, values)
    store.sync()
    return time.perf_counter() - started, ids


def ours_narrow(store: tsdb.Store, data: Telemetry, index: int, start: int, end: int) -> tsdb.QueryResult:
    """Raw samples of one series (selected by all its labels) in [start, end)."""
    return store.query(data.labels[index], start, end)


def ours_avg(store: tsdb.Store, start: int, end: int) -> tsdb.RangeResult:
    """AVG per series over [start, end): one step of query_range over every series (what is timed)."""
    return store.query_range(ALL_SERIES, start, end, end - start, "avg")


Lookup = dict[tuple[str, str, str], int]  # (node, gpu, field) -> the generator's series index


def by_index(result: tsdb.RangeResult, data: Telemetry, lookup: Lookup) -> npt.NDArray[np.float64]:
    """The one-step aggregates of a query_range result, indexed like the generator's series."""
    out = np.full(data.n_series, np.nan)
    for series in result.series:
        labels = series.labels
        assert len(series.values) == 1, f"expected one step, got {len(series.values)}"
        out[lookup[(labels["node"], labels["gpu"], labels["field"])]] = series.values[0]
    return out


# ---------------------------------------------------------------- WAL replay child


def wal_child(path: Path, nodes: int, seed: int, jitter: int) -> None:
    """Append HEAD_HOURS of every node into a fresh store, sync, then die by SIGKILL (no clean close)."""
    data = generate(nodes, HEAD_HOURS, jitter_ms=jitter, seed=seed)
    store = ours_open(path)
    ours_ingest(store, data)
    os.kill(os.getpid(), signal.SIGKILL)


def measure_replay(path: Path, args: argparse.Namespace) -> dict[str, float]:
    """Kill a writer with SIGKILL after HEAD_HOURS of appends, then time the reopen that replays its WAL."""
    cmd = [sys.executable, __file__, "--wal-child", str(path), "--nodes", str(args.nodes), "--seed", str(args.seed)]
    cmd += ["--jitter", str(args.jitter)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"WAL child exited {proc.returncode}: {proc.stderr[-2000:]}")
    wal_bytes = dir_bytes(path / "wal")
    started = time.perf_counter()
    store = ours_open(path)
    open_s = time.perf_counter() - started
    rec = store.recovery
    # Everything the child appended must be readable again, whether replayed from the WAL or
    # (with jitter, a few samples before the first 2 h window) already sealed by the child.
    everything = store.query(ALL_SERIES, -(2**62), 2**62)
    samples_back = sum(int(series.timestamps.size) for series in everything.series)
    store.close()
    return {
        "samples_back": float(samples_back),
        "open_seconds": open_s,
        "recovery_seconds": float(rec.seconds),
        "samples_replayed": float(rec.samples_replayed),
        "records_replayed": float(rec.records_replayed),
        "wal_bytes": float(wal_bytes),
    }


# ---------------------------------------------------------------- the run


def check_narrow(
    ours: tsdb.QueryResult, duck: tuple[npt.NDArray[Any], ...], truth: tuple[npt.NDArray[Any], ...]
) -> None:
    """Our narrow answer equals DuckDB's and the generator's, element by element."""
    assert len(ours.series) == 1, f"narrow query returned {len(ours.series)} series"
    series = ours.series[0]
    for name, (ts, values) in (("duckdb", duck), ("generator", truth)):
        assert np.array_equal(series.timestamps, ts), f"narrow timestamps differ from {name}"
        assert np.array_equal(series.values, values), f"narrow values differ from {name}"


def truth_window(data: Telemetry, index: int, start: int, end: int) -> tuple[npt.NDArray[Any], ...]:
    """What the generator put in [start, end) of one series."""
    ts, values = data.series(index)
    mask = (ts >= start) & (ts < end)
    return ts[mask], values[mask]


def run(args: argparse.Namespace, work: Path) -> Results:
    """Every measurement, in order, with its working files under ``work``."""
    res = Results()
    threads = len(os.sched_getaffinity(0))  # the cores this process may use, not the machine's
    prof = Profiler(args.profile)
    res.raw["machine"] = {
        "cpus": threads,
        "python": platform.python_version(),
        "duckdb": duckdb.__version__,
        "numpy": np.__version__,
        "platform": platform.platform(),
        "processor": platform.processor(),
    }

    console.log(f"generating {args.nodes} nodes x {args.hours} h (jitter {args.jitter} ms, seed {args.seed})")
    data = generate(args.nodes, args.hours, jitter_ms=args.jitter, seed=args.seed)
    n = data.n_samples
    lookup = {(lb["node"], lb["gpu"], lb["field"]): i for i, lb in enumerate(data.labels)}
    windows = make_windows(data, args.windows, args.seed)
    res.raw["data"] = {
        "nodes": data.nodes,
        "series": data.n_series,
        "samples": n,
        "hours": args.hours,
        "jitter_ms": args.jitter,
    }

    # ---- ingest
    console.log(f"ours: ingest {n:,} samples in {data.steps * data.nodes:,} pushes of {data.series_per_node}")
    store_dir = work / "ours"
    store = ours_open(store_dir)
    with prof.phase("ours ingest"):
        ingest_s, _ = ours_ingest(store, data)
    ours_rate = n / ingest_s
    with prof.phase("ours flush"):
        started = time.perf_counter()
        store.flush(force=True)
        flush_s = time.perf_counter() - started
    console.log(f"duckdb: ingest {args.duck_pushes} pushes of 96 rows")
    duck_rate, duck_pushes = duck_small_ingest(data, work / "small.duckdb", threads, args.duck_pushes)
    res.raw["ingest"] = {
        "ours_samples_per_s": ours_rate,
        "ours_seconds": ingest_s,
        "ours_flush_seconds": flush_s,
        "ours_with_flush_samples_per_s": n / (ingest_s + flush_s),
        "duck_samples_per_s": duck_rate,
        "duck_pushes_measured": duck_pushes,
    }
    res.add(
        Figure(
            "ingest, 96-sample pushes, durable WAL",
            rate(ours_rate),
            f"{rate(duck_rate)} ({duck_pushes:,} pushes)",
            f"{ours_rate / duck_rate:.0f}x",
            ">= 1.0M/s",
            ours_rate >= 1e6,
        )
    )
    res.add(
        Figure(
            "  + flush of the head to 2 h segments",
            f"{flush_s:.2f} s -> {rate(n / (ingest_s + flush_s))} overall",
            "",
        )
    )
    res.notes.append(
        f"DuckDB small-batch ingest is measured on the first {duck_pushes:,} of {data.steps * data.nodes:,} pushes "
        "(one autocommitted 96-row INSERT each); at its rate the whole set would take "
        f"{n / duck_rate:,.0f} s."
    )

    # ---- bytes, L0; a copy of this state (closed cleanly, then reopened) serves the retention test
    usage_l0 = dict(store.disk_usage())
    store.close()
    shutil.copytree(store_dir, work / "retention")
    started = time.perf_counter()
    store = ours_open(store_dir)
    reopen_s = time.perf_counter() - started
    res.raw["reopen_after_close"] = {"seconds": reopen_s, "recovery": vars_of(store.recovery)}
    seg_l0 = usage_l0.get("segments", 0) + usage_l0.get("catalog", 0)
    console.log(f"duckdb: bulk load (Arrow) in two orders, {threads} threads")
    layouts = [duck_bulk(data, work / f"{o}.duckdb", threads, o) for o in ("series-sorted", "arrival")]
    by_name = {lay.name: lay for lay in layouts}
    sorted_l, arrival_l = by_name["series-sorted"], by_name["arrival"]
    res.raw["duck_bulk"] = {
        lay.name: {"seconds": lay.load_s, "samples_per_s": n / lay.load_s, "file_bytes": lay.file_bytes}
        for lay in layouts
    }

    # ---- queries on L0, then compaction, then queries on L1
    results_q: dict[str, dict[str, Any]] = {}
    cons = [lay.con for lay in layouts]
    results_q["L0"] = measure_queries(store, data, layouts, windows, args, prof, "L0")
    agree = check_agreement(store, data, lookup, windows, cons, args)
    with prof.phase("ours compact"):
        started = time.perf_counter()
        store.compact()
        compact_s = time.perf_counter() - started
    usage_l1 = dict(store.disk_usage())
    levels = [info.level for info in store.segments()]
    level_note = f"{levels.count(0)} L0 + {len(levels) - levels.count(0)} L1 files"
    seg_l1 = usage_l1.get("segments", 0) + usage_l1.get("catalog", 0)
    results_q["L1"] = measure_queries(store, data, layouts, windows, args, prof, "L1")
    agree = agree and check_agreement(store, data, lookup, windows, cons, args)
    res.raw["bytes"] = {
        "ours_L0_usage": usage_l0,
        "ours_L1_usage": usage_l1,
        "ours_L0_per_sample": seg_l0 / n,
        "ours_L1_per_sample": seg_l1 / n,
        "ours_compact_seconds": compact_s,
        "ours_L1_files": level_note,
        "duck_sorted_per_sample": sorted_l.file_bytes / n,
        "duck_arrival_per_sample": arrival_l.file_bytes / n,
    }
    wal_note = f"catalog {usage_l0.get('catalog', 0) / 1e3:.0f} kB; WAL left {usage_l0.get('wal', 0):,} B"
    res.add(
        Figure(
            "bytes/sample, 2 h segments (+catalog)",
            f"{seg_l0 / n:.3f} ({wal_note})",
            f"{sorted_l.file_bytes / n:.2f} sorted / {arrival_l.file_bytes / n:.2f} arrival",
            f"{sorted_l.file_bytes / seg_l0:.1f}x smaller",
            "<= 0.75",
            seg_l0 / n <= 0.75,
        )
    )
    res.add(
        Figure(
            "bytes/sample, after compact() to 1 day",
            f"{seg_l1 / n:.3f} ({level_note}; compact {compact_s:.2f} s = {rate(n / compact_s)})",
            "",
            f"{sorted_l.file_bytes / seg_l1:.1f}x smaller",
            "<= 0.60",
            seg_l1 / n <= 0.60,
        )
    )

    for level in ("L0", "L1"):
        res.figures += query_figures(level, results_q[level], [lay.name for lay in layouts])
    verdict = "agree: yes" if agree else "agree: NO"
    res.add(Figure("agreement, L0 and L1 (narrow exact, AVG allclose)", verdict, "", ok=agree))
    res.raw["queries"] = results_q

    # ---- retention of the oldest 2 h: ours on a copy of the L0 state, DuckDB in place
    store.close()
    console.log("retention and WAL replay")
    ret = measure_retention(data, work, layouts)
    res.raw["retention"] = ret
    o = ret["ours"]
    res.add(
        Figure(
            "retention of the oldest 2 h",
            f"{ms(o['seconds'])}: {o['segments_deleted']} segment(s) + {o['wal_files_deleted']} WAL file(s) "
            f"deleted, {o['bytes_rewritten']} B rewritten (floor: unlink + dir fsync "
            f"{ms(o['unlink_fsync_floor_seconds'])})",
            f"{ms(ret['series-sorted']['seconds'])} DELETE+CHECKPOINT, file "
            f"{ret['series-sorted']['bytes_before'] / 1e6:.1f} -> {ret['series-sorted']['bytes_after'] / 1e6:.1f} MB",
            f"{ret['series-sorted']['seconds'] / max(o['seconds'], 1e-9):.0f}x faster",
            "<= 10 ms, 0 B rewritten",
            o["seconds"] <= 0.010 and o["bytes_rewritten"] == 0 and o["segments_deleted"] > 0,
        )
    )
    res.add(
        Figure(
            "  DuckDB arrival order",
            "",
            f"{ms(ret['arrival']['seconds'])}, file "
            f"{ret['arrival']['bytes_before'] / 1e6:.1f} -> {ret['arrival']['bytes_after'] / 1e6:.1f} MB",
        )
    )
    for lay in layouts:
        lay.con.close()

    replay = measure_replay(work / "replay", args)
    res.raw["replay"] = replay
    expected = args.nodes * data.series_per_node * round(HEAD_HOURS * HOUR_MS / data.step_ms)
    res.add(
        Figure(
            f"WAL replay on reopen after kill -9 ({HEAD_HOURS} h head)",
            f"{replay['recovery_seconds']:.2f} s for {replay['samples_replayed']:,.0f} samples "
            f"({rate(replay['samples_replayed'] / max(replay['recovery_seconds'], 1e-9))}); "
            f"WAL {replay['wal_bytes'] / max(expected, 1):.2f} B/sample",
            "",
            goal=f"all {expected:,} samples back",  # read back with a query after the reopen
            ok=replay["samples_back"] == expected,
        )
    )
    return res


@dataclass(frozen=True)
class Contender:
    """One system answering the same queries: a narrow query and an AVG per series over a window."""

    name: str
    narrow: Callable[[int, int, int], object]
    avg: Callable[[int, int], object]


def measure_level(contenders: list[Contender], windows: Windows, reps: int) -> dict[str, dict[str, Any]]:
    """Time every contender on the same queries, interleaved: on a shared VM the load changes from
    second to second, so each query runs back to back on every system (in rotating order)."""
    times: dict[str, dict[str, list[float]]] = {c.name: {"narrow": [], "day": [], "unaligned": []} for c in contenders}

    def timed(kind: str, name: str, fn: Callable[..., object], *window: int) -> None:
        started = time.perf_counter()
        fn(*window)
        times[name][kind].append(time.perf_counter() - started)

    for i, (index, start, end) in enumerate(windows.narrow):
        for c in contenders[i % len(contenders) :] + contenders[: i % len(contenders)]:
            timed("narrow", c.name, c.narrow, index, start, end)
    for i in range(reps):
        for c in contenders[i % len(contenders) :] + contenders[: i % len(contenders)]:
            timed("day", c.name, c.avg, *windows.day)
            timed("unaligned", c.name, c.avg, *windows.unaligned)
    return {
        name: {
            "layout": name,
            "narrow_p50": statistics.median(t["narrow"]),
            "narrow_p90": percentile(t["narrow"], 90),
            "day_p50": statistics.median(t["day"]),
            "unaligned_p50": statistics.median(t["unaligned"]),
        }
        for name, t in times.items()
    }


def ours_contender(store: tsdb.Store, data: Telemetry) -> Contender:
    """Our store as a query contender."""

    def narrow(index: int, start: int, end: int) -> object:
        return ours_narrow(store, data, index, start, end)

    def avg(start: int, end: int) -> object:
        return ours_avg(store, start, end)

    return Contender("ours", narrow, avg)


def duck_contender(layout: DuckLayout, data: Telemetry) -> Contender:
    """One DuckDB layout as a query contender."""

    def narrow(index: int, start: int, end: int) -> object:
        return duck_narrow(layout.con, index, start, end)

    def avg(start: int, end: int) -> object:
        return duck_avg(layout.con, data.n_series, start, end)

    return Contender(layout.name, narrow, avg)


def measure_queries(
    store: tsdb.Store,
    data: Telemetry,
    layouts: list[DuckLayout],
    windows: Windows,
    args: argparse.Namespace,
    prof: Profiler,
    level: str,
) -> dict[str, Any]:
    """Our store (at this level) and every DuckDB layout on the same windows, interleaved."""
    console.log(f"queries: ours {level} and DuckDB ({', '.join(lay.name for lay in layouts)}), interleaved")
    contenders = [ours_contender(store, data), *(duck_contender(lay, data) for lay in layouts)]
    out: dict[str, Any] = measure_level(contenders, windows, args.agg_reps)
    index, start, end = windows.narrow[-1]
    out["ours"]["narrow_stats"] = vars_of(ours_narrow(store, data, index, start, end).stats)
    out["ours"]["day_stats"] = vars_of(ours_avg(store, *windows.day).stats)
    out["ours"]["unaligned_stats"] = vars_of(ours_avg(store, *windows.unaligned).stats)
    if prof.enabled:
        # Profiled again on their own, after the timing, so that cProfile does not skew it.
        with prof.phase(f"ours narrow {level}"):
            for index, start, end in windows.narrow:
                ours_narrow(store, data, index, start, end)
        with prof.phase(f"ours day-aligned avg {level}"):
            repeat(lambda: ours_avg(store, *windows.day), args.agg_reps)
        with prof.phase(f"ours unaligned avg {level}"):
            repeat(lambda: ours_avg(store, *windows.unaligned), args.agg_reps)
    return out


def vars_of(obj: object) -> dict[str, Any]:
    """The fields of a (slotted) dataclass as a dict, for --json."""
    if obj is None:
        return {}
    if hasattr(obj, "__dataclass_fields__"):
        return {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    return dict(vars(obj)) if hasattr(obj, "__dict__") else {"repr": repr(obj)}


def check_agreement(
    store: tsdb.Store,
    data: Telemetry,
    lookup: Lookup,
    windows: Windows,
    cons: list[duckdb.DuckDBPyConnection],
    args: argparse.Namespace,
) -> bool:
    """Both systems (and the generator) give the same answers; raises AssertionError where they do not."""
    for index, start, end in windows.narrow[: args.check_windows]:
        truth = truth_window(data, index, start, end)
        for con in cons:
            check_narrow(ours_narrow(store, data, index, start, end), duck_narrow(con, index, start, end), truth)
    for start, end in (windows.day, windows.unaligned):
        ours = by_index(ours_avg(store, start, end), data, lookup)
        for con in cons:
            duck = duck_avg(con, data.n_series, start, end)
            assert np.allclose(ours, duck, rtol=1e-9, atol=0, equal_nan=True), (
                f"AVG over [{start}, {end}) differs: max rel err "
                f"{np.nanmax(np.abs(ours - duck) / np.maximum(np.abs(duck), 1e-300)):.3g}"
            )
    return True


def query_figures(level: str, q: dict[str, Any], duck_names: list[str]) -> list[Figure]:
    """Rows for one level: ours against the fastest DuckDB layout measured alongside it."""
    ours = q["ours"]

    def best(key: str) -> dict[str, Any]:
        return min((q[name] for name in duck_names), key=lambda d: float(d[key]))

    narrow, day, unaligned = best("narrow_p50"), best("day_p50"), best("unaligned_p50")
    slower = ours["unaligned_p50"] / unaligned["unaligned_p50"]
    return [
        Figure(
            f"narrow 1 series x 1 h, p50 / p90 ({level})",
            f"{ms(ours['narrow_p50'])} / {ms(ours['narrow_p90'])}",
            f"{ms(narrow['narrow_p50'])} / {ms(narrow['narrow_p90'])} ({narrow['layout']})",
            f"{narrow['narrow_p50'] / ours['narrow_p50']:.1f}x faster",
            ">= 4x faster",
            narrow["narrow_p50"] / ours["narrow_p50"] >= 4,
        ),
        Figure(
            f"AVG per series, day-aligned, p50 ({level})",
            ms(ours["day_p50"]),
            f"{ms(day['day_p50'])} ({day['layout']})",
            f"{day['day_p50'] / ours['day_p50']:.0f}x faster",
            ">= 20x faster",
            day["day_p50"] / ours["day_p50"] >= 20,
        ),
        Figure(
            f"AVG per series, unaligned, p50 ({level})",
            ms(ours["unaligned_p50"]),
            f"{ms(unaligned['unaligned_p50'])} ({unaligned['layout']})",
            f"{slower:.2f}x slower" if slower >= 1 else f"{1 / slower:.2f}x faster",
            "<= 1.5x slower",
            slower <= 1.5,
        ),
    ]


def measure_retention(data: Telemetry, work: Path, layouts: list[DuckLayout]) -> dict[str, Any]:
    """Drop the oldest 2 h: ours on copies of the flushed store (2 h segments) reopened with retention_ms.

    A single deletion takes milliseconds, so a scheduler hiccup on a shared VM would dominate one
    timing: it runs on RETENTION_COPIES copies of the same state and reports the median.
    """
    span = data.end_ms - data.start_ms
    retention_ms = span - SEGMENT_MS
    now_ms = data.end_ms
    original = work / "retention"
    times = []
    for i in range(RETENTION_COPIES):
        copy = work / f"retention-{i}"
        shutil.copytree(original, copy)
        # Write the fresh copy out first: otherwise the deletion's directory fsync would pay for
        # journaling the copy, which a store in steady state never has to.
        os.sync()
        store = ours_open(copy, retention_ms=retention_ms)
        before = files_state(copy)
        started = time.perf_counter()
        report = store.enforce_retention(now_ms)
        times.append(time.perf_counter() - started)
        after = files_state(copy)
        store.close()
    # Every file that survived must be byte-for-byte the same file (WAL apart: it is append-only).
    rewritten = sum(st[0] for name, st in after.items() if before.get(name) != st and not name.startswith("wal"))
    ours = {
        "seconds": statistics.median(times),
        "seconds_all": times,
        "files_deleted": len(report.deleted_files),
        "segments_deleted": report.segments_deleted,
        "wal_files_deleted": report.wal_files_deleted,
        "bytes_freed": int(report.bytes_freed),
        "bytes_rewritten": int(rewritten),
        "cutoff_ms": now_ms - retention_ms,
    }
    ours["unlink_fsync_floor_seconds"] = unlink_floor(work, max(1, int(report.bytes_freed) // 2))
    out: dict[str, Any] = {"ours": ours}
    for lay in layouts:
        out[lay.name] = duck_retention(lay, data.start_ms + SEGMENT_MS)
    return out


# ---------------------------------------------------------------- output


def render(res: Results, args: argparse.Namespace) -> None:
    """The rich table (stdout, or stderr with --json) and the notes."""
    data = res.raw["data"]
    machine = res.raw["machine"]
    # Wide enough for the table even when the output goes to a file or a pipe.
    out = Console(stderr=args.json, width=max(Console().width, 170))
    table = Table(
        title=(
            f"tsdb.Store vs DuckDB {machine['duckdb']}: {data['samples']:,} samples, {data['series']} series, "
            f"{data['hours']} h, jitter {data['jitter_ms']} ms, {machine['cpus']} cpus"
        )
    )
    table.add_column("metric", justify="left")
    for col in ("ours", "DuckDB", "ratio"):
        table.add_column(col, justify="right")
    table.add_column("goal")
    table.add_column("")
    for f in res.figures:
        verdict = "" if f.ok is None else ("[green]PASS[/]" if f.ok else "[red]MISS[/]")
        table.add_row(f.metric, f.ours, f.duck, f.ratio, f.goal, verdict)
    out.print(table)
    for note in res.notes:
        out.print(f"note: {note}")


def main() -> None:
    """Parse the arguments, run everything in a temporary directory, print the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=12)
    parser.add_argument("--hours", type=float, default=DEFAULT_HOURS, help="a little over a day, so it compacts")
    parser.add_argument("--quick", action="store_true", help="a few seconds: 2 nodes, fewer repetitions")
    parser.add_argument("--jitter", type=int, default=0, help="+- ms of scrape jitter (e.g. 25)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--windows", type=int, default=300, help="random narrow-query windows")
    parser.add_argument("--check-windows", type=int, default=30, help="narrow windows compared for agreement")
    parser.add_argument("--agg-reps", type=int, default=5, help="repetitions of each aggregate query")
    parser.add_argument("--duck-pushes", type=int, default=1200, help="pushes measured for DuckDB's small inserts")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", action="store_true", help="JSON on stdout (the table goes to stderr)")
    parser.add_argument("--profile", action="store_true", help="cProfile our phases, top functions to stderr")
    parser.add_argument("--wal-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    # The store logs each open, flush and compaction at info; keep stdout for --json and the table.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    if args.wal_child is not None:
        wal_child(args.wal_child, args.nodes, args.seed, args.jitter)
        return
    if args.quick:
        args.nodes, args.hours = 2, DEFAULT_HOURS
        args.windows, args.agg_reps, args.duck_pushes = min(args.windows, 100), 3, 600

    work = Path(tempfile.mkdtemp(prefix="gpucloud-tsdb-bench-", dir=args.dir))
    started = time.perf_counter()
    try:
        res = run(args, work)
    finally:
        if args.keep:
            console.log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    res.raw["wall_seconds"] = time.perf_counter() - started
    res.raw["date"] = time.strftime("%Y-%m-%d")
    render(res, args)
    if args.json:
        figures = [vars(f) for f in res.figures]
        print(json.dumps({"figures": figures, **res.raw, "notes": res.notes}, indent=2, default=str))
    console.log(f"total {res.raw['wall_seconds']:.0f} s")


if __name__ == "__main__":
    main()

"""Micro-benchmark of the tsdb codecs on synthetic GPU telemetry.

    uv run python bench/codecs.py                 # short run: 4 nodes, blocks of 720 and 8640 samples
    uv run python bench/codecs.py --nodes 12 --level 3

Per field kind (one block = that field across a node's 8 GPUs, rows=8): bytes/sample of the value
blobs, encode and decode samples/s (best of --repeat runs: the machine is shared, and the fastest run
is the least disturbed one), decode_value_rows of one row, decode_value_row of half a row (the
narrow query's read, in microseconds per blob), the kinds chosen for the rows, and each node's
blocks coded together by encode_value_blocks (the segment writer's path).
`util_gaps` is util with 0.3% of the samples missing (NaN). Timestamps are one column per node
(regular 10 s scrapes, and a +-25 ms jitter variant), shared by all of the node's series.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, bench/ comes first on sys.path, where bench/tsdb.py would hide the tsdb package.
sys.path[:0] = [str(ROOT)]

from tsdb import codecs  # noqa: E402

F64 = NDArray[np.float64]
GPUS = 8
STEP_MS = 10_000
KIND_NAMES = {codecs.CONST: "const", codecs.DECIMAL: "dec", codecs.XOR: "xor", codecs.PATCHED: "patched"}


def busy_phases(rng: np.random.Generator, n: int) -> NDArray[np.bool_]:
    """Busy/idle phases of about an hour (360 samples) each, per GPU."""
    out = np.empty((GPUS, n), dtype=bool)
    for gpu in range(GPUS):
        lengths = rng.exponential(360, size=n // 30 + 2).astype(int) + 1
        states = (np.arange(lengths.size) % 2 == 0) ^ (rng.random() < 0.5)
        out[gpu] = np.repeat(states, lengths)[:n]
    return out


def telemetry(rng: np.random.Generator, n: int) -> dict[str, F64]:
    """One node's 8 GPUs x n samples of each field kind."""
    shape = (GPUS, n)
    busy = busy_phases(rng, n)
    noise = rng.normal(0.0, 1.0, shape)
    idle_blips = np.where(rng.random(shape) < 0.05, 1.0, 0.0)
    util = np.where(busy, np.clip(93.0 + 5.0 * noise, 0.0, 100.0), idle_blips)
    mem_util = np.where(busy, np.clip(45.0 + 10.0 * rng.normal(0.0, 1.0, shape), 0.0, 100.0), 0.0)
    throttle = np.cumsum(rng.random(shape) < 0.03, axis=1) % 8  # throttling moves in 15 MHz steps
    sm_clock = np.where(busy, 1980.0 - 15.0 * throttle, 1410.0)
    target = np.where(busy, 72.0, 34.0)
    temp = np.empty(shape)
    temp[:, 0] = target[:, 0]
    for i in range(1, n):  # thermal lag: an exponential filter towards the target
        temp[:, i] = temp[:, i - 1] + 0.05 * (target[:, i] - temp[:, i - 1])
    true_power = np.where(busy, 640.0, 72.0) + 12.0 * rng.normal(0.0, 1.0, shape)
    energy_mj = 1.0e12 + np.cumsum(np.round(true_power * STEP_MS), axis=1)
    jobs = np.cumsum(rng.random(shape) < 0.002, axis=1)
    fb = 512.0 + 4096.0 * (jobs % 20)
    return {
        "util": np.round(util),
        "util_gaps": np.where(rng.random(shape) < 0.003, np.nan, np.round(util)),
        "mem_copy_util": np.round(mem_util),
        "sm_clock_mhz": sm_clock,
        "mem_clock_mhz": np.full(shape, 2619.0),
        "gpu_temp_c": np.round(temp + 0.3 * rng.normal(0.0, 1.0, shape)),
        "mem_temp_c": np.round(temp + 6.0),
        "power_w": np.round(true_power + 2.0 * noise, 3),
        "energy_mj": energy_mj,
        "ecc_sbe": np.cumsum(rng.random(shape) < 0.001, axis=1).astype(np.float64),
        "ecc_dbe": np.zeros(shape),
        "pcie_replay": np.cumsum(rng.random(shape) < 0.0005, axis=1).astype(np.float64),
        "fb_used_mib": fb,
    }


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Seconds of the fastest of `repeat` calls."""
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return min(runs)


def encode_all(blocks: list[F64], level: int) -> None:
    for block in blocks:
        codecs.encode_values(block, level=level)


def decode_all(blobs: list[bytes], rows: list[int] | None = None) -> None:
    for blob in blobs:
        if rows is None:
            codecs.decode_values(blob)
        else:
            codecs.decode_value_rows(blob, rows)


def decode_slices(blobs: list[bytes], n: int) -> None:
    """The narrow query's read: the middle half of row 3 of every blob."""
    for blob in blobs:
        codecs.decode_value_row(blob, 3, n // 4, 3 * n // 4)


def encode_nodes(matrices: list[F64], level: int) -> None:
    """The segment writer's path: each node's matrix of every field, coded as 8-row blocks at once."""
    for matrix in matrices:
        codecs.encode_value_blocks(matrix, [(lo, lo + GPUS) for lo in range(0, matrix.shape[0], GPUS)], level=level)


def encode_all_ts(columns: list[NDArray[np.int64]], level: int) -> None:
    for column in columns:
        codecs.encode_timestamps(column, level=level)


def decode_all_ts(blobs: list[bytes]) -> None:
    for blob in blobs:
        codecs.decode_timestamps(blob)


def bench_values(blocks: dict[str, list[F64]], level: int, repeat: int) -> int:
    """Print one line per field and a total; return the bytes of all value blobs."""
    print(f"{'field':<15} {'B/sample':>9} {'enc Msps':>9} {'dec Msps':>9} {'rows Msps':>9} {'slice us':>9}  kinds")
    total_bytes = total_samples = 0
    total_enc = total_dec = 0.0
    for field, field_blocks in blocks.items():
        blobs = [codecs.encode_values(b, level=level) for b in field_blocks]
        for block, blob in zip(field_blocks, blobs, strict=True):
            assert (codecs.decode_values(blob).view(np.uint64) == block.view(np.uint64)).all()
        samples = sum(b.size for b in field_blocks)
        size = sum(len(b) for b in blobs)
        enc = timed(functools.partial(encode_all, field_blocks, level), repeat)
        dec = timed(functools.partial(decode_all, blobs), repeat)
        one = timed(functools.partial(decode_all, blobs, [3]), repeat)
        n = field_blocks[0].shape[1]
        part = timed(functools.partial(decode_slices, blobs, n), repeat)
        kinds = Counter(
            f"{KIND_NAMES[kind]}{k if kind in (codecs.DECIMAL, codecs.PATCHED) else ''}"
            for b in blobs
            for kind, k in codecs.row_kinds(b)
        )
        print(
            f"{field:<15} {size / samples:9.3f} {samples / enc / 1e6:9.2f} {samples / dec / 1e6:9.2f} "
            f"{samples / GPUS / one / 1e6:9.2f} {part / len(blobs) * 1e6:9.1f}  {dict(kinds)}"
        )
        total_bytes += size
        total_samples += samples
        total_enc += enc
        total_dec += dec
    print(
        f"{'ALL values':<15} {total_bytes / total_samples:9.3f} {total_samples / total_enc / 1e6:9.2f} "
        f"{total_samples / total_dec / 1e6:9.2f}"
    )
    nodes = len(next(iter(blocks.values())))
    matrices = [np.concatenate([field_blocks[node] for field_blocks in blocks.values()]) for node in range(nodes)]
    together = timed(functools.partial(encode_nodes, matrices, level), repeat)
    print(
        f"{'node matrices':<15} {'':>9} {total_samples / together / 1e6:9.2f}  "
        "(encode_value_blocks: all fields at once)"
    )
    return total_bytes


def bench_timestamps(
    rng: np.random.Generator, nodes: int, n: int, level: int, repeat: int, samples_per_node: int, value_bytes: int
) -> None:
    """Print one line per timestamp variant, with the store's total bytes/sample (values + timestamps)."""
    start = 1_700_000_000_000
    regular = [start + STEP_MS * np.arange(n, dtype=np.int64) for _ in range(nodes)]
    jittered = [t + rng.integers(-25, 26, n) for t in regular]
    for name, columns in (("regular", regular), ("jitter25ms", jittered)):
        blobs = [codecs.encode_timestamps(t, level=level) for t in columns]
        for column, blob in zip(columns, blobs, strict=True):
            assert (codecs.decode_timestamps(blob) == column).all()
        size = sum(len(b) for b in blobs)
        enc = timed(functools.partial(encode_all_ts, columns, level), repeat)
        dec = timed(functools.partial(decode_all_ts, blobs), repeat)
        print(
            f"ts {name:<12} {size:7d} B  {size / (nodes * n):.4f} B/timestamp, "
            f"{size / (nodes * samples_per_node):.4f} B/sample (shared by {samples_per_node // n} series)  "
            f"enc {nodes * n / enc / 1e6:.2f} Mts/s  dec {nodes * n / dec / 1e6:.2f} Mts/s"
        )
        print(f"   total with {name} timestamps: {(value_bytes + size) / (nodes * samples_per_node):.3f} B/sample")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4, help="nodes (blocks per field per block length)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[720, 8640], help="samples per block")
    parser.add_argument("--level", type=int, default=1, help="zstd level")
    parser.add_argument("--repeat", type=int, default=5, help="timing repetitions (the fastest counts)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    for n in args.sizes:
        rng = np.random.default_rng(args.seed)
        per_node = [telemetry(rng, n) for _ in range(args.nodes)]
        blocks = {field: [node[field] for node in per_node] for field in per_node[0]}
        print(f"\n== blocks of {GPUS} rows x {n} samples, {args.nodes} nodes, zstd level {args.level} ==")
        value_bytes = bench_values(blocks, args.level, args.repeat)
        samples_per_node = GPUS * len(blocks) * n
        bench_timestamps(rng, args.nodes, n, args.level, args.repeat, samples_per_node, value_bytes)


if __name__ == "__main__":
    main()

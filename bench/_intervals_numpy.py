"""Synthetic usage intervals for the accounting benchmark, and the numpy baseline it is judged by.

Neither is product code. The generator shapes a month of a dense fleet: usage rows with uniform
starts and exponential durations, plus overlapping re-reports and exact duplicates, as resending
agents produce, in log order (by end time), so that no method gets per-GPU order for free. The
baseline is the fastest single-process way known here to take a per-GPU union, so the engine
has a yardstick measured in the same run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]

US_PER_SECOND = 1_000_000
MONTH_US = 30 * 86_400 * US_PER_SECOND
MEAN_DURATION_US = 1_800 * US_PER_SECOND
DUPLICATE_SHARE = 0.02  # exact copies of a row, as a resending agent produces
REREPORT_SHARE = 0.05  # the same usage reported again with a later start and its own end


@dataclass(frozen=True)
class Intervals:
    """Columns of ``[start_us, end_us)`` usage on ``gpu`` (0 .. gpus-1), times relative to the
    period start. Rows are in log order (by end time), so nobody gets per-GPU order for free."""

    gpu: I64
    start: I64
    end: I64
    gpus: int

    def __len__(self) -> int:
        return len(self.gpu)


def generate(intervals: int, gpus: int = 10_000, seed: int = 20261201) -> Intervals:
    """``intervals`` rows: base usage, ~5% overlapping re-reports of it, ~2% exact duplicates.

    Base rows start uniformly over 30 days with Exp(30 min) durations (at least 1 µs), clipped
    to the month. A re-report starts inside the row it repeats, so the two always overlap.
    """
    rng = np.random.default_rng(seed)
    duplicates = round(intervals * DUPLICATE_SHARE)
    rereports = round(intervals * REREPORT_SHARE)
    base = intervals - duplicates - rereports

    gpu = rng.integers(0, gpus, base, dtype=np.int64)
    start = rng.integers(0, MONTH_US, base, dtype=np.int64)
    end = np.minimum(start + _durations(rng, base), np.int64(MONTH_US))

    source = rng.integers(0, base, rereports)
    re_start = start[source] + (rng.random(rereports) * (end[source] - start[source])).astype(np.int64)
    re_end = np.minimum(re_start + _durations(rng, rereports), np.int64(MONTH_US))
    gpu = np.concatenate([gpu, gpu[source]])
    start = np.concatenate([start, re_start])
    end = np.concatenate([end, re_end])

    copied = rng.integers(0, base + rereports, duplicates)
    gpu = np.concatenate([gpu, gpu[copied]])
    start = np.concatenate([start, start[copied]])
    end = np.concatenate([end, end[copied]])

    order = np.argsort(end, kind="stable")
    return Intervals(gpu[order], start[order], end[order], gpus)


def _durations(rng: np.random.Generator, n: int) -> I64:
    return _at_least_one(rng.exponential(MEAN_DURATION_US, n))


def _at_least_one(durations: npt.NDArray[np.float64]) -> I64:
    return np.maximum(durations.astype(np.int64), np.int64(1))


def union_per_gpu(data: Intervals) -> I64:
    """Covered µs per GPU (index = gpu), overlaps counted once: one argsort and one scan.

    The sort key packs ``gpu << shift | start`` into one int64, which numpy sorts far faster
    than a two-key lexsort. Ends get the same packing, so a plain running maximum never carries
    one GPU's end into the next GPU (every key of GPU g+1 exceeds every key of GPU g). Row i,
    in start order, adds ``max(0, end_i - max(start_i, max(end_0 .. end_{i-1})))`` of new
    coverage; that holds for any order among equal starts, so no tiebreaker is needed.
    """
    if len(data) == 0:
        return np.zeros(data.gpus, dtype=np.int64)
    shift = int(max(int(data.end.max()), int(data.start.max()), 1)).bit_length()
    if data.gpus.bit_length() + shift > 62 or min(int(data.start.min()), int(data.end.min())) < 0:
        raise ValueError("times must be non-negative offsets small enough to pack with the GPU index")
    start_key = (data.gpu << shift) | data.start
    order = np.argsort(start_key)
    start_key = start_key[order]
    gpu_sorted = data.gpu[order]
    end_key = (gpu_sorted << shift) | data.end[order]
    reach = np.maximum.accumulate(end_key)
    covered_before = np.empty_like(reach)
    covered_before[0] = -1
    covered_before[1:] = reach[:-1]
    gain = end_key - np.maximum(start_key, covered_before)
    np.maximum(gain, np.int64(0), out=gain)
    # Rows are grouped by GPU now: per-GPU sums are differences of one running sum.
    running = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(gain)])
    bounds = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(np.bincount(gpu_sorted, minlength=data.gpus))])
    return np.asarray(running[bounds[1:]] - running[bounds[:-1]], dtype=np.int64)


def generate_outages(gpus: int = 10_000, seed: int = 20261202) -> Intervals:
    """Outages on ~5% of GPUs: 1 to 3 each, Exp(2 h) long, ~10% of them reported twice."""
    rng = np.random.default_rng(seed)
    hit = rng.choice(gpus, size=max(1, gpus // 20), replace=False)
    gpu = np.repeat(hit, rng.integers(1, 4, len(hit))).astype(np.int64)
    start = rng.integers(0, MONTH_US, len(gpu), dtype=np.int64)
    end = np.minimum(start + _at_least_one(rng.exponential(7_200 * US_PER_SECOND, len(gpu))), np.int64(MONTH_US))
    again = rng.random(len(gpu)) < np.float64(0.1)
    return Intervals(
        np.concatenate([gpu, gpu[again]]),
        np.concatenate([start, start[again]]),
        np.concatenate([end, end[again]]),
        gpus,
    )


def credit_per_gpu(usage: Intervals, outages: Intervals) -> I64:
    """Covered µs per GPU that fall inside an outage: |U(usage) ∩ U(outages)| by inclusion-exclusion,
    ``U(a) + U(b) - U(a and b together)``, on the usage of the GPUs that had an outage only."""
    hit = np.isin(usage.gpu, outages.gpu)
    mine = Intervals(usage.gpu[hit], usage.start[hit], usage.end[hit], usage.gpus)
    both = Intervals(
        np.concatenate([mine.gpu, outages.gpu]),
        np.concatenate([mine.start, outages.start]),
        np.concatenate([mine.end, outages.end]),
        usage.gpus,
    )
    return union_per_gpu(mine) + union_per_gpu(outages) - union_per_gpu(both)

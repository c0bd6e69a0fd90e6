"""Deterministic, numpy-vectorised GPU telemetry of the shape a node agent scrapes.

    from bench.telemetry import generate
    data = generate(nodes=12, hours=24, seed=0)          # 12 x 8 GPUs x 12 fields at 10 s = 9.95M samples
    for step, node, timestamp_ms, values in data.pushes(): ...   # what one node sends at one scrape

Every node pushes one scrape of 96 samples (8 GPUs x 12 fields) every ``step_ms``; series are
numbered node-major, then GPU, then field (``data.labels[i]`` belongs to column ``i`` of a
node's push, offset by ``node * 96``). The same seed gives the same bytes on every machine.

The fields imitate what NVML/DCGM report on a busy fleet, since a store's bytes/sample depend on
it: integer utilisation with busy/idle phases of about an hour, copy-engine utilisation, an SM
clock in 15 MHz steps, a constant memory clock, integer temperatures behind a thermal lag,
3-decimal noisy power, a monotonic energy counter in mJ, rare ECC and PCIe replay increments,
and framebuffer use that steps with the job.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FIELDS: tuple[str, ...] = (
    "gpu_util",
    "mem_copy_util",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "gpu_temp_c",
    "mem_temp_c",
    "power_w",
    "energy_mj",
    "ecc_sbe_total",
    "ecc_dbe_total",
    "pcie_replay_total",
    "fb_used_mib",
)
GPUS_PER_NODE = 8
STEP_MS = 10_000
# 2026-01-01T00:00:00Z: day-aligned, so a day of data fills exactly one day window.
DAY0_MS = 1_767_225_600_000
DAY_MS = 86_400_000

_F = {name: i for i, name in enumerate(FIELDS)}


@dataclass(frozen=True)
class Telemetry:
    """A generated fleet's samples, laid out the way they arrive (push-major)."""

    nodes: int
    gpus: int
    steps: int
    step_ms: int
    start_ms: int
    labels: list[dict[str, str]]
    # [nodes, steps] int64: one scrape timestamp per node per step (jittered if asked).
    timestamps: npt.NDArray[np.int64]
    # [steps, nodes, gpus * len(FIELDS)] float64: values[t, n] is node n's push at step t.
    values: npt.NDArray[np.float64]
    series_per_node: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "series_per_node", self.gpus * len(FIELDS))

    @property
    def n_series(self) -> int:
        """Number of series (nodes x GPUs x fields)."""
        return self.nodes * self.series_per_node

    @property
    def n_samples(self) -> int:
        """Number of samples in the whole data set."""
        return self.n_series * self.steps

    @property
    def end_ms(self) -> int:
        """The nominal end of the data (exclusive): start + steps x step."""
        return self.start_ms + self.steps * self.step_ms

    def node_series(self, node: int) -> npt.NDArray[np.int64]:
        """Series indices of one node's push, in push column order."""
        base = node * self.series_per_node
        return np.arange(base, base + self.series_per_node, dtype=np.int64)

    def pushes(self, steps: range | None = None) -> Iterator[tuple[int, int, int, npt.NDArray[np.float64]]]:
        """Yield (step, node, timestamp_ms, values[96]) in arrival order: all nodes at step 0, then step 1..."""
        for t in steps if steps is not None else range(self.steps):
            for n in range(self.nodes):
                yield t, n, int(self.timestamps[n, t]), self.values[t, n]

    def arrival_columns(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """(series, ts, value) flattened in arrival order: push after push."""
        spn = self.series_per_node
        sid = np.broadcast_to(np.arange(self.n_series, dtype=np.int32), (self.steps, self.n_series)).reshape(-1)
        ts = np.repeat(self.timestamps.T.reshape(-1), spn)
        return sid.copy(), ts, self.values.reshape(-1)

    def sorted_columns(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """(series, ts, value) flattened series by series, each series in time order."""
        spn = self.series_per_node
        sid = np.repeat(np.arange(self.n_series, dtype=np.int32), self.steps)
        ts = np.repeat(self.timestamps, spn, axis=0).reshape(-1)
        value = self.values.reshape(self.steps, self.n_series).T.reshape(-1)
        return sid, ts, np.ascontiguousarray(value)

    def series(self, index: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """(timestamps, values) of one series."""
        node, column = divmod(index, self.series_per_node)
        return self.timestamps[node], self.values[:, node, column]


def _phases(rng: np.random.Generator, rows: int, steps: int, mean_steps: float) -> npt.NDArray[np.int64]:
    """Per row, a phase number for every step; phases last an exponential time of mean ``mean_steps``."""
    count = int(steps / mean_steps * 3) + 8
    lengths = np.maximum(1, rng.exponential(mean_steps, size=(rows, count))).astype(np.int64)
    ends = np.cumsum(lengths, axis=1)
    # Random phase offset so that nodes do not all start a phase at step 0.
    ends -= rng.integers(0, int(mean_steps) + 1, size=(rows, 1))
    idx = np.arange(steps)
    return np.stack([np.searchsorted(ends[r], idx, side="right") for r in range(rows)])


def _lag(target: npt.NDArray[np.float64], start: npt.NDArray[np.float64], alpha: float) -> npt.NDArray[np.float64]:
    """First-order thermal lag along the last axis (vectorised over all other axes)."""
    out = np.empty_like(target)
    y = start.copy()
    for t in range(target.shape[-1]):
        y += alpha * (target[..., t] - y)
        out[..., t] = y
    return out


def _counter(rng: np.random.Generator, shape: tuple[int, ...], per_step: float) -> npt.NDArray[np.float64]:
    """A monotonic counter with rare Poisson increments, starting at a small random total."""
    base = rng.integers(0, 5, size=(*shape[:-1], 1)).astype(np.float64)
    return base + np.cumsum(rng.poisson(per_step, size=shape), axis=-1)


def generate(
    nodes: int = 12,
    hours: float = 24.0,
    *,
    gpus: int = GPUS_PER_NODE,
    step_ms: int = STEP_MS,
    jitter_ms: int = 0,
    seed: int = 0,
    start_ms: int = DAY0_MS,
) -> Telemetry:
    """Generate ``hours`` of telemetry for ``nodes`` x ``gpus`` GPUs, deterministic in ``seed``.

    ``jitter_ms`` moves each scrape timestamp by a uniform integer in [-jitter_ms, +jitter_ms]
    (one draw per node per step: all 96 series of a push share it, as they do in an agent).
    """
    if nodes < 1 or gpus < 1 or hours <= 0 or step_ms <= 0 or jitter_ms < 0:
        raise ValueError("nodes, gpus, hours and step_ms must be positive; jitter_ms must be >= 0")
    if 2 * jitter_ms >= step_ms:
        raise ValueError("jitter must stay below half a step so that each series stays in time order")
    rng = np.random.default_rng(seed)
    steps = round(hours * 3_600_000 / step_ms)
    shape = (nodes, gpus, steps)
    steps_per_hour = 3_600_000 / step_ms

    # Busy/idle phases of about an hour per node (a job holds all of a node's GPUs); phase
    # parity decides busy (even) or idle (odd), and each busy phase gets its own job profile.
    phase = _phases(rng, nodes, steps, steps_per_hour)  # [nodes, steps]
    busy_node = phase % 2 == 0
    busy = np.broadcast_to(busy_node[:, None, :], shape)
    n_phases = int(phase.max()) + 1
    job_util = rng.uniform(70, 99, size=(nodes, n_phases))
    job_fb = rng.integers(8_000, 78_000, size=(nodes, n_phases))
    load = np.take_along_axis(job_util, phase, axis=1)[:, None, :]

    util = np.where(busy, load + rng.normal(0, 4, shape), rng.choice([0.0, 0.0, 0.0, 1.0, 2.0], size=shape))
    util = np.clip(np.rint(util), 0, 100)
    copy_util = np.where(busy, util * rng.uniform(0.2, 0.5, size=(nodes, gpus, 1)) + rng.normal(0, 3, shape), 0.0)
    copy_util = np.clip(np.rint(copy_util), 0, 100)

    power = np.where(busy, 110 + 5.6 * util, 68 + util) + rng.normal(0, 6, shape)
    power = np.clip(power, 50.0, 700.0).round(3)
    # Energy counter in mJ at the nominal step, as NVML reports it (integer, monotonic).
    energy0 = rng.integers(10**9, 10**11, size=(nodes, gpus, 1)).astype(np.float64)
    energy = energy0 + np.rint(np.cumsum(power * (step_ms / 1000) * 1000, axis=-1))

    ambient = rng.uniform(24, 32, size=(nodes, gpus, 1))
    gpu_target = ambient + 0.075 * power
    gpu_temp = np.rint(_lag(gpu_target, gpu_target[..., 0].copy(), 0.08))
    mem_temp = np.rint(_lag(gpu_target + 6, gpu_target[..., 0] + 6, 0.05))

    # SM clock: 1980 MHz boost, throttled in 15 MHz steps as the GPU gets hot; 345 MHz idle.
    throttle = np.clip(np.floor((gpu_temp - 60) / 2), 0, 20)
    sm_clock = np.where(busy, 1980 - 15 * throttle, 345.0)
    mem_clock = np.full(shape, 2619.0)

    sbe = _counter(rng, shape, 2e-4)
    dbe = _counter(rng, shape, 5e-6)
    replay = _counter(rng, shape, 5e-4)
    fb_job = np.take_along_axis(job_fb, phase, axis=1)[:, None, :].astype(np.float64)
    fb = np.where(busy, fb_job + 512 * rng.integers(0, 3, size=(nodes, gpus, 1)), 0.0)

    per_field = {
        "gpu_util": util,
        "mem_copy_util": copy_util,
        "sm_clock_mhz": sm_clock,
        "mem_clock_mhz": mem_clock,
        "gpu_temp_c": gpu_temp,
        "mem_temp_c": mem_temp,
        "power_w": power,
        "energy_mj": energy,
        "ecc_sbe_total": sbe,
        "ecc_dbe_total": dbe,
        "pcie_replay_total": replay,
        "fb_used_mib": fb,
    }
    stacked = np.stack([per_field[name] for name in FIELDS], axis=2)  # [nodes, gpus, fields, steps]
    values = np.ascontiguousarray(np.moveaxis(stacked.reshape(nodes, gpus * len(FIELDS), steps), 2, 0))

    timestamps = start_ms + np.arange(steps, dtype=np.int64)[None, :] * step_ms
    timestamps = np.repeat(timestamps, nodes, axis=0)
    if jitter_ms:
        timestamps = timestamps + rng.integers(-jitter_ms, jitter_ms + 1, size=(nodes, steps))

    labels = [
        {"node": f"node-{n:04d}", "gpu": str(g), "field": name}
        for n in range(nodes)
        for g in range(gpus)
        for name in FIELDS
    ]
    return Telemetry(
        nodes=nodes,
        gpus=gpus,
        steps=steps,
        step_ms=step_ms,
        start_ms=start_ms,
        labels=labels,
        timestamps=np.ascontiguousarray(timestamps, dtype=np.int64),
        values=values,
    )

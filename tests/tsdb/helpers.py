"""Shared test data for the tsdb suite: a small GPU fleet, pushes, and a plain numpy reference."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

import tsdb

FIELDS = ("util", "power_w", "energy_j")
T0 = 1_700_000_013_000  # deliberately not aligned to a minute


@dataclass
class Fleet:
    """Labels, per-series timestamps and values of a small synthetic fleet."""

    labels: list[dict[str, str]]
    timestamps: NDArray[np.int64]  # shared by every series
    values: NDArray[np.float64]  # (series, samples)
    nodes: int

    def series(self, index: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        return self.timestamps, self.values[index]


def make_fleet(nodes: int = 2, gpus: int = 2, samples: int = 600, interval_ms: int = 1_000, seed: int = 7) -> Fleet:
    """util: integers 0..100; power_w: 3-decimal noise; energy_j: a counter that resets once per GPU."""
    rng = np.random.default_rng(seed)
    labels = [{"node": f"n{n}", "gpu": str(g), "field": f} for n in range(nodes) for g in range(gpus) for f in FIELDS]
    values = np.empty((len(labels), samples))
    for i, item in enumerate(labels):
        if item["field"] == "util":
            values[i] = rng.integers(0, 101, samples)
        elif item["field"] == "power_w":
            values[i] = np.round(rng.normal(300, 40, samples), 3)
        else:
            counter = np.cumsum(rng.integers(0, 500, samples)).astype(float)
            reset = int(rng.integers(samples // 4, 3 * samples // 4))
            counter[reset:] -= counter[reset] - float(rng.integers(0, 50))
            values[i] = counter
    timestamps = T0 + interval_ms * np.arange(samples, dtype=np.int64)
    return Fleet(labels, timestamps, values, nodes)


def ingest(store: tsdb.Store, fleet: Fleet, sids: NDArray[np.int64], upto: int | None = None) -> None:
    """One push per node per timestamp, as agents do."""
    per_node = sids.size // fleet.nodes
    for i in range(fleet.timestamps.size if upto is None else upto):
        for node in range(fleet.nodes):
            part = slice(node * per_node, (node + 1) * per_node)
            store.append(sids[part], int(fleet.timestamps[i]), fleet.values[part, i])


def reference_range(
    ts: NDArray[np.int64], vals: NDArray[np.float64], start: int, end: int, step: int, agg: str
) -> NDArray[np.float64]:
    """The aggregate per step, computed the obvious way."""
    n_steps = -(-(end - start) // step)
    out = np.full(n_steps, np.nan)
    for k in range(n_steps):
        lo, hi = start + k * step, min(start + (k + 1) * step, end)
        mask = (ts >= lo) & (ts < hi)
        t, v = ts[mask], vals[mask]
        if v.size == 0:
            continue
        if agg == "avg":
            out[k] = v.mean()
        elif agg == "sum":
            out[k] = v.sum()
        elif agg == "min":
            out[k] = v.min()
        elif agg == "max":
            out[k] = v.max()
        elif agg == "count":
            out[k] = v.size
        elif agg == "last":
            out[k] = v[-1]
        elif agg == "rate" and v.size > 1:
            delta = np.diff(v)
            increase = np.where(delta < 0, v[1:], delta).sum()
            out[k] = increase / ((t[-1] - t[0]) / 1000)
    return out


def sha256_files(directory: Path) -> dict[str, str]:
    """Name -> sha256 of every file directly in `directory`."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}

"""A month of usage events for the invoice benchmark (``bench/accounting.py --invoice``).

Not product code. Nodes of 8 GPUs are handed to one allocation after another (1, 2, 4 or 8 of
their GPUs, on-demand or spot, for one of 100 tenants), and the log carries the faults the
engines must report: ~1% of events resent under the same id, ~0.1% of starts re-reported under
a new id, ~0.01% of stops and of starts lost. Allocations may begin before the period, and the
last one on a node may still be running at its end. Seeded, so every engine sees the same log.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

import numpy as np

from accounting.model import (
    Commitment,
    EventKind,
    Outage,
    Period,
    PriceClass,
    Rates,
    UsageEvent,
    datetime_to_us,
)

HOUR_US = 3_600 * 1_000_000
PERIOD = Period(
    datetime_to_us(datetime(2026, 11, 1, tzinfo=UTC)),
    datetime_to_us(datetime(2026, 12, 1, tzinfo=UTC)),
)
TENANTS = 100
LOST = 0.0001  # share of starts, and of stops, that never reach the log
RATES = Rates(
    currency="USD",
    gpu_hour={
        "H100": {PriceClass.ON_DEMAND: Decimal("2.49"), PriceClass.SPOT: Decimal("1.10")},
        "A100": {PriceClass.ON_DEMAND: Decimal("1.29"), PriceClass.SPOT: Decimal("0.60")},
    },
    commitments=tuple(Commitment(f"tenant-{t:03d}", "H100", 16, Decimal("1.80")) for t in range(3)),
)
SIZES = np.array([1, 2, 4, 8])


def generate_events(events: int, gpus: int = 10_000, seed: int = 20261203) -> list[UsageEvent]:
    """About ``events`` events (start and stop per GPU of each allocation, plus the faults), by time."""
    rng = np.random.default_rng(seed)
    nodes = max(1, gpus // 8)
    per_node = max(1, round(events / (2 * SIZES.mean()) / nodes))
    # Back-to-back allocations per node: on average the month holds ``per_node`` cycles of
    # a gap (a quarter) and a run (three quarters). Draw plenty and keep those that start in time.
    cycle_us = (PERIOD.end_us - PERIOD.start_us) / per_node
    draws = 2 * per_node + 20
    gaps = rng.exponential(cycle_us * 0.25, (nodes, draws)).astype(np.int64)
    runs = np.maximum(rng.exponential(cycle_us * 0.75, (nodes, draws)).astype(np.int64), np.int64(1))
    first = PERIOD.start_us - rng.exponential(cycle_us / 2, nodes).astype(np.int64)
    stops = first[:, None] + np.cumsum(gaps + runs, axis=1)
    starts = stops - runs
    sizes = rng.choice(SIZES, (nodes, draws))
    tenants = rng.integers(TENANTS, size=(nodes, draws))
    spot = rng.random((nodes, draws)) < np.float64(0.2)

    out: list[UsageEvent] = []
    allocation = 0
    # One draw per possible event decides whether it is lost; a few spare for the last node.
    lost = iter((rng.random(int(sizes.sum()) * 2) < np.float64(LOST)).tolist())
    for node in range(nodes):
        model = "H100" if node < nodes * 7 // 10 else "A100"
        for k in range(draws):
            start, stop = int(starts[node, k]), int(stops[node, k])
            if start >= PERIOD.end_us:
                break
            allocation_id = f"alloc-{allocation:07d}"
            allocation += 1
            klass = PriceClass.SPOT if spot[node, k] else PriceClass.ON_DEMAND
            tenant = f"tenant-{int(tenants[node, k]):03d}"
            for slot in range(int(sizes[node, k])):
                gpu = f"GPU-{node:04d}-{slot}"
                if not next(lost):
                    event_id = f"ev-{len(out):09d}"
                    out.append(UsageEvent(event_id, tenant, allocation_id, gpu, model, EventKind.START, start, klass))
                # Stops after the export are not in the log yet: the allocation is open.
                if stop < PERIOD.end_us and not next(lost):
                    event_id = f"ev-{len(out):09d}"
                    out.append(UsageEvent(event_id, tenant, allocation_id, gpu, model, EventKind.STOP, stop, klass))

    resent = [out[i] for i in rng.choice(len(out), size=len(out) // 100, replace=False)]
    started = [e for e in out if e.kind is EventKind.START]
    rereported = [
        replace(started[i], event_id=f"ev-re-{n:07d}")
        for n, i in enumerate(rng.choice(len(started), size=len(started) // 1000, replace=False))
    ]
    log = out + resent + rereported
    order = np.argsort(np.array([e.at_us for e in log]), kind="stable")
    return [log[i] for i in order]


def generate_outages(gpus: int = 10_000, seed: int = 20261204) -> list[Outage]:
    """Outages on ~2% of GPUs, Exp(4 h) long, ~10% of them reported twice."""
    rng = np.random.default_rng(seed)
    out: list[Outage] = []
    for gpu in rng.choice(gpus, size=max(1, gpus // 50), replace=False):
        node, slot = divmod(int(gpu), 8)
        start = int(rng.integers(PERIOD.start_us, PERIOD.end_us))
        outage = Outage(f"GPU-{node:04d}-{slot}", start, start + int(rng.exponential(4 * HOUR_US)) + 1)
        out.extend([outage, outage] if rng.random() < 0.1 else [outage])
    return out

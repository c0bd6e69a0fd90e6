"""Exact duplicate rows must not make results vary between runs: without a unique tiebreaker,
a gaps-and-islands union over duplicate rows gave 2 distinct totals in 5 runs at 1M rows."""

from __future__ import annotations

import random
from collections import defaultdict

import pyarrow as pa

from accounting import EventKind, PriceClass, UsageEvent, compute_invoices
from accounting.engine import union_seconds
from accounting.intervals import Interval, total
from tests.accounting.helpers import HOUR_US, P0, PERIOD, RATES


def _log_with_exact_duplicates(seed: int = 7) -> list[UsageEvent]:
    """~3000 holds on 50 GPUs, 2% of events resent as exact copies, 5% re-reported under new ids."""
    rng = random.Random(seed)
    events: list[UsageEvent] = []
    for n in range(3000):
        gpu, tenant = f"g{rng.randrange(50)}", f"t{rng.randrange(5)}"
        begin = P0 + rng.randrange(-HOUR_US, 10 * HOUR_US)
        end = begin + rng.randrange(1, 2 * HOUR_US)
        pair = [
            UsageEvent(f"e{n}/start", tenant, f"a{n}", gpu, "H100", EventKind.START, begin, PriceClass.ON_DEMAND),
            UsageEvent(f"e{n}/stop", tenant, f"a{n}", gpu, "H100", EventKind.STOP, end, PriceClass.ON_DEMAND),
        ]
        if rng.random() < 0.05:  # the same interval again under new ids: identical (start, end) rows
            pair += [
                UsageEvent(f"r{n}/start", tenant, f"r{n}", gpu, "H100", EventKind.START, begin, PriceClass.ON_DEMAND),
                UsageEvent(f"r{n}/stop", tenant, f"r{n}", gpu, "H100", EventKind.STOP, end, PriceClass.ON_DEMAND),
            ]
        events += pair
    events += [rng.choice(events) for _ in range(len(events) // 50)]
    rng.shuffle(events)
    return events


def test_five_runs_on_duplicate_rows_give_identical_invoices() -> None:
    events = _log_with_exact_duplicates()
    runs = [compute_invoices(events, RATES, PERIOD, engine="duckdb") for _ in range(5)]
    assert all(run == runs[0] for run in runs[1:])
    assert runs[0] == compute_invoices(events, RATES, PERIOD, engine="reference")
    assert runs[0].reconciliation.extra["DUPLICATE_EVENT"] > 0
    assert runs[0].reconciliation.same_tenant_overlap_seconds > 0


def test_union_seconds_is_stable_and_exact_on_duplicate_rows() -> None:
    rng = random.Random(11)
    rows = []
    for _ in range(50_000):
        begin = rng.randrange(0, 10**9)
        rows.append((rng.randrange(500), begin, begin + rng.randrange(1, 10**7)))
    rows += [rng.choice(rows) for _ in range(1_000)]  # 2% exact duplicate rows
    table = pa.table({"gpu_id": [r[0] for r in rows], "start_us": [r[1] for r in rows], "end_us": [r[2] for r in rows]})

    results = [union_seconds(table) for _ in range(5)]
    assert all(result.equals(results[0]) for result in results[1:])

    by_gpu: dict[int, list[Interval]] = defaultdict(list)
    for gpu, begin, end in rows:
        by_gpu[gpu].append(Interval(begin, end))
    expected = {gpu: total(spans) for gpu, spans in by_gpu.items()}
    assert dict(zip(results[0]["gpu_id"].to_pylist(), results[0]["union_us"].to_pylist(), strict=True)) == expected

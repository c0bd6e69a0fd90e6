"""Random usage logs for property tests: duplicates (exact and conflicting), overlaps, orphans,
cross-tenant sharing, boundary-crossing intervals, outages and commitments."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

from hypothesis import strategies as st

from accounting import Commitment, EventKind, Outage, Period, PriceClass, Rates, UsageEvent

MINUTE = 60_000_000
PERIOD = Period(0, 100 * MINUTE)
GPUS = {"g1": "H100", "g2": "H100", "g3": "H100", "g4": "A100"}
# A GPU whose events disagree on its model (a bad inventory): billed as two GPUs, one per model.
MISREPORTED = "g5"
times = st.integers(-20, 120).map(lambda m: m * MINUTE)


@st.composite
def usage_logs(draw: st.DrawFn) -> list[UsageEvent]:
    """A log in input order: fresh events, then repeats of some of them spliced in."""
    events = []
    for n in range(draw(st.integers(0, 30))):
        gpu = draw(st.sampled_from([*sorted(GPUS), MISREPORTED]))
        model = draw(st.sampled_from(["H100", "A100"])) if gpu == MISREPORTED else GPUS[gpu]
        events.append(
            UsageEvent(
                event_id=f"e{n}",
                tenant_id=draw(st.sampled_from(["acme", "beta", "corp"])),
                allocation_id=draw(st.sampled_from(["a1", "a2"])),
                gpu_uuid=gpu,
                gpu_model=model,
                kind=draw(st.sampled_from(EventKind)),
                at_us=draw(times),
                price_class=draw(st.sampled_from([PriceClass.ON_DEMAND, PriceClass.ON_DEMAND, PriceClass.SPOT])),
            )
        )
    for _ in range(draw(st.integers(0, 6)) if events else 0):
        original = draw(st.sampled_from(events))
        repeat = original
        if draw(st.booleans()):  # a conflicting copy: same id, another payload
            repeat = dataclasses.replace(original, at_us=draw(times), kind=draw(st.sampled_from(EventKind)))
        events.insert(draw(st.integers(0, len(events))), repeat)
    return events


outage_lists = st.lists(
    st.tuples(st.sampled_from(sorted(GPUS)), times, st.integers(1, 40)).map(
        lambda g: Outage(g[0], g[1], g[1] + g[2] * MINUTE)
    ),
    max_size=4,
)


@st.composite
def price_books(draw: st.DrawFn) -> Rates:
    """H100 on-demand and spot; A100 on-demand only (its spot usage is unpriced); maybe commitments."""
    commitments = []
    if draw(st.booleans()):
        commitments.append(Commitment("acme", "H100", draw(st.integers(1, 2)), Decimal("2.10")))
    if draw(st.booleans()):
        commitments.append(Commitment("beta", "A100", 1, Decimal("1.50")))
    return Rates(
        "USD",
        {
            "H100": {PriceClass.ON_DEMAND: Decimal("2.49"), PriceClass.SPOT: Decimal("1.10")},
            "A100": {PriceClass.ON_DEMAND: Decimal("1.79")},
        },
        tuple(commitments),
    )

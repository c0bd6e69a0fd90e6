"""Commitments: R GPUs paid for the whole period, on-demand beyond them billed as overage.

Ten-hour period; acme commits to H100 at 2.10 per GPU-hour, overage is at the 2.49 on-demand rate.
"""

from __future__ import annotations

from decimal import Decimal

from accounting import AnomalyKind, PriceClass
from tests.accounting.helpers import both_engines, held, invoice, kinds, line, outage, run, with_commitment

COMMITTED, OVERAGE, SPOT = PriceClass.COMMITTED, PriceClass.OVERAGE, PriceClass.SPOT


@both_engines
def test_under_use_still_pays_the_whole_commitment(engine: str) -> None:
    result = run(engine, held("x", "acme", "a1", "g1", 0, 5), rates=with_commitment("acme", "H100", 2, "2.10"))
    committed = line(result, "acme", "H100", COMMITTED)
    assert committed.gpu_seconds == Decimal(72000)  # 2 GPUs * 10 h = 20 GPU-h = 72000 s
    assert committed.amount == Decimal("42.00")  # 20 GPU-h * 2.10
    assert [x.price_class for x in invoice(result, "acme").lines] == [COMMITTED]  # no on-demand, no overage
    assert invoice(result, "acme").total == Decimal("42.00")
    assert result.reconciliation.committed_covered_seconds == Decimal(18000)  # the 5 h used


@both_engines
def test_a_commitment_with_no_usage_is_still_invoiced(engine: str) -> None:
    result = run(engine, held("x", "beta", "b1", "g1", 0, 1), rates=with_commitment("acme", "H100", 1, "2.10"))
    assert invoice(result, "acme").total == Decimal("21.00")  # 1 GPU * 10 h * 2.10


@both_engines
def test_overage_is_the_time_integral_of_gpus_beyond_the_commitment(engine: str) -> None:
    events = [
        *held("x", "acme", "a1", "g1", 0, 10),
        *held("y", "acme", "a1", "g2", 2, 6),
        *held("z", "acme", "a2", "g3", 4, 5),
    ]
    result = run(engine, events, rates=with_commitment("acme", "H100", 1, "2.10"))
    # n(t): 1 on [0, 2), 2 on [2, 4), 3 on [4, 5), 2 on [5, 6), 1 on [6, 10)
    # beyond 1 GPU: 2 h * 1 + 1 h * 2 + 1 h * 1 = 5 GPU-h = 18000 s
    overage = line(result, "acme", "H100", OVERAGE)
    assert (overage.gpu_seconds, overage.gpu_hour_rate) == (Decimal(18000), Decimal("2.49"))
    assert overage.amount == Decimal("12.45")  # 5 GPU-h * 2.49
    assert line(result, "acme", "H100", COMMITTED).amount == Decimal("21.00")  # 1 GPU * 10 h * 2.10
    assert invoice(result, "acme").total == Decimal("33.45")
    assert not [x for x in invoice(result, "acme").lines if x.price_class is PriceClass.ON_DEMAND]


@both_engines
def test_a_gpu_reported_twice_is_still_one_gpu(engine: str) -> None:
    events = [*held("x", "acme", "a1", "g1", 0, 6), *held("y", "acme", "a2", "g1", 2, 8)]
    result = run(engine, events, rates=with_commitment("acme", "H100", 1, "2.10"))
    # One GPU at every instant: n(t) <= 1, so no overage although two intervals overlap on [2, 6).
    assert [x.price_class for x in invoice(result, "acme").lines] == [COMMITTED]
    assert invoice(result, "acme").total == Decimal("21.00")
    assert kinds(result) == [AnomalyKind.SAME_TENANT_OVERLAP]


@both_engines
def test_credited_time_does_not_count_toward_overage(engine: str) -> None:
    events = [*held("x", "acme", "a1", "g1", 0, 4), *held("y", "acme", "a1", "g2", 0, 4)]
    result = run(engine, events, [outage("g2", 0, 2)], rates=with_commitment("acme", "H100", 1, "2.10"))
    # g2 is credited on [0, 2): n(t) is 1 there and 2 on [2, 4), so 2 GPU-h beyond the commitment.
    assert line(result, "acme", "H100", OVERAGE).gpu_seconds == Decimal(7200)
    assert line(result, "acme", "H100", OVERAGE).amount == Decimal("4.98")  # 2 GPU-h * 2.49
    assert invoice(result, "acme").credited_gpu_seconds == Decimal(7200)


@both_engines
def test_spot_usage_is_not_covered_by_a_commitment(engine: str) -> None:
    events = [*held("x", "acme", "a1", "g1", 0, 4), *held("s", "acme", "a2", "g2", 0, 4, spot=True)]
    result = run(engine, events, rates=with_commitment("acme", "H100", 1, "2.10"))
    assert line(result, "acme", "H100", SPOT).amount == Decimal("4.40")  # 4 h * 1.10, its own line
    assert not [x for x in invoice(result, "acme").lines if x.price_class is OVERAGE]  # n(t) = 1 on demand
    assert invoice(result, "acme").total == Decimal("25.40")  # 21.00 committed + 4.40 spot

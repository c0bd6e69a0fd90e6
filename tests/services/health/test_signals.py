"""From reported GPU status to the health policy's strikes, and on to a decision."""

from __future__ import annotations

from services.health import Action, decide
from services.health.policy import (
    ECC_CORRECTABLE_RISING,
    ECC_UNCORRECTABLE,
    OFF_BUS,
    ROW_REMAP_FAILURE,
    ROW_REMAP_PENDING,
    THROTTLE_POWER,
    THROTTLE_THERMAL,
    XID_UNKNOWN,
    xid,
)
from services.health.signals import GpuReading, observations


def signals(readings: list[GpuReading], before: list[GpuReading] | None = None) -> list[tuple[str, int | None]]:
    previous = None if before is None else {gpu.index: gpu for gpu in before}
    return [(o.signal, o.gpu) for o in observations(readings, previous, 100.0)]


def test_a_healthy_status_carries_no_strike() -> None:
    assert signals([GpuReading(i, throttle_reasons=frozenset({"gpu_idle"})) for i in range(8)]) == []


def test_each_bad_reading_is_a_strike_on_its_gpu() -> None:
    readings = [
        GpuReading(0, present=False),
        GpuReading(1, xid_codes=(48, 999)),
        GpuReading(2, throttle_reasons=frozenset({"hw_thermal_slowdown", "sw_power_cap"})),
        GpuReading(3, remapped_rows_pending=True, remapped_rows_failure=True),
    ]
    assert signals(readings) == [
        (OFF_BUS, 0),
        (xid(48), 1),
        (XID_UNKNOWN, 1),
        (THROTTLE_THERMAL, 2),
        (THROTTLE_POWER, 2),
        (ROW_REMAP_PENDING, 3),
        (ROW_REMAP_FAILURE, 3),
    ]


def test_ecc_counters_count_only_when_they_rise_between_statuses() -> None:
    now = [GpuReading(0, ecc_corrected_total=12, ecc_uncorrected_total=1), GpuReading(1, ecc_corrected_total=5)]
    assert signals(now) == []  # a first status: nothing says when the totals grew
    before = [GpuReading(0, ecc_corrected_total=10, ecc_uncorrected_total=0), GpuReading(1, ecc_corrected_total=5)]
    assert signals(now, before) == [(ECC_UNCORRECTABLE, 0), (ECC_CORRECTABLE_RISING, 0)]


def test_statuses_over_a_day_become_a_decision() -> None:
    """Correctable ECC rising in three reports within a day drains the GPU's node after the job."""
    strikes = []
    previous: dict[int, GpuReading] | None = None
    for hour, total in enumerate((10, 14, 19, 27)):
        reading = GpuReading(6, ecc_corrected_total=total)
        strikes += observations([reading], previous, hour * 3600.0)
        previous = {6: reading}
    decision = decide(strikes, 3 * 3600.0)
    assert decision is not None
    assert (decision.action, decision.gpu, decision.strikes) == (Action.DRAIN_AFTER_JOB, 6, 3)

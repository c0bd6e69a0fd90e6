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


def test_an_xid_counts_from_when_the_driver_raised_it_within_a_day_and_never_later() -> None:
    now_s = 200_000.0
    raised = [
        GpuReading(1, xid_codes=(79,), xid_times_ms=(round((now_s - 600) * 1000),)),
        GpuReading(2, xid_codes=(48, 13), xid_times_ms=(0, round((now_s + 60) * 1000))),
        GpuReading(3, xid_codes=(74,)),
        # Times that do not pair with the codes are not taken.
        GpuReading(4, xid_codes=(74, 74), xid_times_ms=(1,)),
    ]
    found = [(o.signal, o.gpu, o.at_s) for o in observations(raised, None, now_s)]
    assert found == [
        (xid(79), 1, now_s - 600),
        (xid(48), 2, now_s - 86_400),  # at most a day back
        (xid(13), 2, now_s),  # never after the status arrived
        (xid(74), 3, now_s),  # no time: from the arrival
        (xid(74), 4, now_s),
        (xid(74), 4, now_s),
    ]

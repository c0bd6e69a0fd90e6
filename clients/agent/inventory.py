"""What an agent reads of its GPUs: the inventory (what each GPU is), a sample (how it is doing
now) and XID events (errors the driver reported). Plain values, no I/O."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ThrottleReason(enum.StrEnum):
    """Why a GPU's clocks are below their maximum (NVML's clocks event reasons)."""

    GPU_IDLE = "gpu_idle"
    APPLICATIONS_CLOCKS_SETTING = "applications_clocks_setting"
    SW_POWER_CAP = "sw_power_cap"
    HW_SLOWDOWN = "hw_slowdown"
    SYNC_BOOST = "sync_boost"
    SW_THERMAL_SLOWDOWN = "sw_thermal_slowdown"
    HW_THERMAL_SLOWDOWN = "hw_thermal_slowdown"
    HW_POWER_BRAKE_SLOWDOWN = "hw_power_brake_slowdown"
    DISPLAY_CLOCK_SETTING = "display_clock_setting"


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU as the node reports it: identity, model and firmware. ``None``: the GPU does not
    report that field."""

    index: int
    uuid: str
    name: str
    serial: str | None
    memory_bytes: int
    driver_version: str
    vbios_version: str | None
    inforom_version: str | None


@dataclass(frozen=True, slots=True)
class RemappedRows:
    """HBM rows the GPU replaced with spares: counts by the error that caused it, a remap waiting
    for the next GPU reset, and a remap that failed (the GPU is out of spare rows)."""

    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU's readings at ``timestamp_ms`` (milliseconds since the Unix epoch). Attribute names
    are the metrics field names the control plane stores (``power_w``, ``temp_c``, ...); ``None``
    means the GPU does not report that reading."""

    index: int
    timestamp_ms: int
    temp_c: float | None
    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    power_w: float | None
    util_pct: float | None
    memory_used_bytes: int | None
    ecc_corrected_total: int | None
    ecc_uncorrected_total: int | None
    remapped_rows: RemappedRows | None
    throttle_reasons: frozenset[ThrottleReason] | None

    def fields(self) -> dict[str, float]:
        """The readings as metrics fields (name -> value), leaving out those not reported. The
        throttle reasons are a set, not a number, and are not among them."""
        values: dict[str, float | int | bool | None] = {
            "temp_c": self.temp_c,
            "sm_clock_mhz": self.sm_clock_mhz,
            "mem_clock_mhz": self.mem_clock_mhz,
            "power_w": self.power_w,
            "util_pct": self.util_pct,
            "memory_used_bytes": self.memory_used_bytes,
            "ecc_corrected_total": self.ecc_corrected_total,
            "ecc_uncorrected_total": self.ecc_uncorrected_total,
        }
        if self.remapped_rows is not None:
            rows = self.remapped_rows
            values |= {
                "remapped_rows_correctable": rows.correctable,
                "remapped_rows_uncorrectable": rows.uncorrectable,
                "remapped_rows_pending": rows.pending,
                "remapped_rows_failure": rows.failure,
            }
        return {name: float(value) for name, value in values.items() if value is not None}


@dataclass(frozen=True, slots=True)
class XidEvent:
    """An XID error the driver reported for GPU ``index``; ``timestamp_ms`` is when the agent
    read it."""

    index: int
    code: int
    timestamp_ms: int

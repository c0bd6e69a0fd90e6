"""From what an agent reports of its GPUs to the observations the health policy counts.

An agent's status (AgentService ``NodeStatus``) describes each GPU as it is now: present or
off the bus, its throttle reasons, the XID codes raised since the last status, lifetime ECC
counters and the row-remap flags. ``observations`` turns one status, given the one before it,
into strikes: a GPU off the bus, each XID code, thermal or power throttling, a counter that
rose, a remap pending or failed. Counters count only when they rise between two statuses: a
first status says nothing of when its totals accumulated. An XID code counts from when the
driver raised it, as the agent timed it (within the last day, not after the status arrived);
every other strike from the status's arrival; an XID keeps the number the agent's journal gave
it, so that a replay of it is stored once. Pure, like the policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from services.health.policy import (
    ECC_CORRECTABLE_RISING,
    ECC_UNCORRECTABLE,
    OFF_BUS,
    ROW_REMAP_FAILURE,
    ROW_REMAP_PENDING,
    THROTTLE_POWER,
    THROTTLE_THERMAL,
    Observation,
    signal_of_xid,
)

# NVML's clocks event reasons (the agent reports their names) that mean heat or power.
THERMAL_REASONS = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"})
POWER_REASONS = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})
# How far before a status's arrival an XID's own time is taken: a day of outage at most.
XID_BACKDATE_S = 86_400.0


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU in one status, as the agent reported it."""

    index: int
    present: bool = True
    throttle_reasons: frozenset[str] = frozenset()
    xid_codes: tuple[int, ...] = ()
    # When each of ``xid_codes`` was raised (ms since the epoch), when the agent said.
    xid_times_ms: tuple[int, ...] = ()
    # The agent journal's number of each of ``xid_codes``, when the agent said.
    xid_seqs: tuple[int, ...] = ()
    ecc_corrected_total: int = 0
    ecc_uncorrected_total: int = 0
    remapped_rows_pending: bool = False
    remapped_rows_failure: bool = False


def observations(
    readings: Iterable[GpuReading], before: Mapping[int, GpuReading] | None, at_s: float
) -> list[Observation]:
    """The strikes one status carries, at ``at_s``; ``before`` is the previous status's GPUs by
    index (None for a node's first status)."""
    found: list[Observation] = []
    for gpu in readings:
        index = gpu.index
        signals: list[str] = []
        if not gpu.present:
            signals.append(OFF_BUS)
        times = gpu.xid_times_ms if len(gpu.xid_times_ms) == len(gpu.xid_codes) else ()
        seqs = gpu.xid_seqs if len(gpu.xid_seqs) == len(gpu.xid_codes) else ()
        for i, code in enumerate(gpu.xid_codes):
            raised_s = min(at_s, max(at_s - XID_BACKDATE_S, times[i] / 1000)) if times else at_s
            journaled = (seqs[i], times[i]) if seqs and times else (None, None)
            found.append(Observation(signal_of_xid(code), raised_s, index, *journaled))
        if gpu.throttle_reasons & THERMAL_REASONS:
            signals.append(THROTTLE_THERMAL)
        if gpu.throttle_reasons & POWER_REASONS:
            signals.append(THROTTLE_POWER)
        previous = None if before is None else before.get(index)
        if previous is not None:
            if gpu.ecc_uncorrected_total > previous.ecc_uncorrected_total:
                signals.append(ECC_UNCORRECTABLE)
            if gpu.ecc_corrected_total > previous.ecc_corrected_total:
                signals.append(ECC_CORRECTABLE_RISING)
        if gpu.remapped_rows_pending:
            signals.append(ROW_REMAP_PENDING)
        if gpu.remapped_rows_failure:
            signals.append(ROW_REMAP_FAILURE)
        found += [Observation(signal, at_s, index) for signal in signals]
    return found

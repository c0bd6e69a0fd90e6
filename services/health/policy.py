"""The health policy: the one table that turns a node's signals into an action.

Each ``Rule`` names a signal, the action it calls for, and how many strikes within how long a
window it takes. ``decide`` counts a node's observations against every rule and returns the
most severe action whose rule fired, with the evidence. A strike is an observation of a bad
signal; a good one in between does not clear it, so a fault that fails, passes and fails again
is counted twice, not reset (an intermittent fault is the common way hardware starts to die).

XID codes are grouped by NVIDIA's resolution buckets (the Xid catalog's immediate actions):
those an application causes and recovers from, those that need the GPU reset, those that point
at the hardware. docs/health.md says why each signal maps where it does, and what false drains
and missed faults cost at fleet scale. Pure: no I/O, no clock; the caller supplies ``now``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

HOUR_S = 3600.0
DAY_S = 24 * HOUR_S


class Action(IntEnum):
    """What a decision asks for, least to most severe: ``decide`` picks the highest that fired."""

    NONE = 0
    # Tell the tenant (its job may have seen an error); the node stays in service.
    NOTIFY_TENANT = 1
    # Take no new work; the tenant keeps the node until its allocation ends.
    DRAIN_AFTER_JOB = 2
    # The node cannot run work correctly now: take it from its tenant (a spare replaces it).
    DRAIN_NOW = 3
    # Out of service until an operator looks: the signal is not one automation can judge.
    QUARANTINE = 4
    # Out of service for a repair automation can attempt (GPU reset, power cycle), then burn-in again.
    REPAIR = 5
    # Out of service for good until the part is replaced.
    RMA = 6


# XID codes by resolution bucket (NVIDIA Xid catalog).
XID_APPLICATION = frozenset({13, 31, 43, 45, 94})
XID_NEEDS_RESET = frozenset({46, 62, 95, 119, 120})


@dataclass(frozen=True, slots=True)
class Rule:
    """``strikes`` observations of ``signal`` within ``window_s`` call for ``action``. With
    ``spacing_s``, a strike closer than that to the last one counted is not counted again: a
    job retrying into the same error is one strike, not three."""

    signal: str
    action: Action
    strikes: int
    window_s: float
    why: str
    spacing_s: float = 0.0


def xid(code: int) -> str:
    """The signal name of XID ``code``."""
    return f"xid:{code}"


# Signals other than XID codes.
ECC_CORRECTABLE_RISING = "ecc_correctable_rising"
ECC_UNCORRECTABLE = "ecc_uncorrectable"
ROW_REMAP_PENDING = "row_remap_pending"
ROW_REMAP_FAILURE = "row_remap_failure"
THROTTLE_THERMAL = "throttle:thermal"
THROTTLE_POWER = "throttle:power"
OFF_BUS = "off_bus"
MISSED_HEARTBEATS = "missed_heartbeats"
BURN_IN_FAILED = "burn_in_failed"
CHECK_FAILED = "periodic_check_failed"
SLOW_GPU = "slow_gpu"
XID_UNKNOWN = "xid:unknown"


def _xid_rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for code in sorted(XID_APPLICATION):
        rules.append(Rule(xid(code), Action.NOTIFY_TENANT, 1, HOUR_S, "an application error: the job, not the GPU"))
    # A page fault that keeps coming back on the same GPU is the GPU's memory, not the job; but
    # a job that faults on every retry raises it three times in minutes: strikes an hour apart.
    rules.append(Rule(xid(31), Action.DRAIN_AFTER_JOB, 3, DAY_S, "page faults recurring on one GPU", spacing_s=HOUR_S))
    for code in sorted(XID_NEEDS_RESET):
        rules.append(Rule(xid(code), Action.DRAIN_NOW, 1, HOUR_S, "the GPU stopped and needs a reset"))
        rules.append(Rule(xid(code), Action.REPAIR, 2, DAY_S, "a reset fault twice in a day"))
    rules += [
        Rule(xid(48), Action.DRAIN_NOW, 1, HOUR_S, "double-bit ECC: the job's data may be wrong"),
        Rule(xid(48), Action.RMA, 2, 7 * DAY_S, "double-bit ECC again within a week"),
        Rule(xid(63), Action.NOTIFY_TENANT, 1, HOUR_S, "a row remapped: the memory healed itself"),
        Rule(xid(64), Action.RMA, 1, HOUR_S, "row remapping failed: no spare rows left"),
        Rule(xid(74), Action.DRAIN_AFTER_JOB, 1, HOUR_S, "an NVLink error"),
        Rule(xid(74), Action.REPAIR, 3, DAY_S, "NVLink errors recurring"),
        Rule(xid(79), Action.REPAIR, 1, HOUR_S, "the GPU fell off the bus: a power cycle"),
        Rule(xid(92), Action.NOTIFY_TENANT, 1, HOUR_S, "a high single-bit ECC rate"),
        Rule(xid(154), Action.DRAIN_NOW, 1, HOUR_S, "the driver asks for a recovery action"),
        Rule(XID_UNKNOWN, Action.NOTIFY_TENANT, 1, HOUR_S, "an XID code this policy does not name"),
        Rule(XID_UNKNOWN, Action.QUARANTINE, 3, DAY_S, "unnamed XID codes recurring: an operator looks"),
    ]
    return tuple(rules)


POLICY: tuple[Rule, ...] = (
    *_xid_rules(),
    Rule(ECC_CORRECTABLE_RISING, Action.DRAIN_AFTER_JOB, 3, DAY_S, "correctable ECC rising, report after report"),
    Rule(ECC_UNCORRECTABLE, Action.DRAIN_NOW, 1, HOUR_S, "an uncorrectable ECC error"),
    Rule(ROW_REMAP_PENDING, Action.DRAIN_AFTER_JOB, 1, HOUR_S, "a remap waits for a GPU reset"),
    Rule(ROW_REMAP_FAILURE, Action.RMA, 1, HOUR_S, "row remapping failed"),
    Rule(THROTTLE_THERMAL, Action.NOTIFY_TENANT, 1, HOUR_S, "thermal throttling slows the job"),
    Rule(THROTTLE_THERMAL, Action.REPAIR, 6, HOUR_S, "throttling for heat most of an hour: cooling"),
    Rule(THROTTLE_POWER, Action.NOTIFY_TENANT, 6, HOUR_S, "power capping most of an hour"),
    Rule(OFF_BUS, Action.REPAIR, 1, HOUR_S, "a GPU missing from the node: a power cycle"),
    Rule(OFF_BUS, Action.RMA, 3, 7 * DAY_S, "a GPU fell off the bus three times in a week"),
    Rule(MISSED_HEARTBEATS, Action.DRAIN_AFTER_JOB, 3, HOUR_S, "the node went silent three times in an hour"),
    Rule(BURN_IN_FAILED, Action.QUARANTINE, 1, HOUR_S, "burn-in under the fleet median"),
    Rule(CHECK_FAILED, Action.DRAIN_AFTER_JOB, 1, DAY_S, "a periodic check failed"),
    Rule(CHECK_FAILED, Action.QUARANTINE, 2, 7 * DAY_S, "periodic checks failing on and off"),
    Rule(SLOW_GPU, Action.DRAIN_AFTER_JOB, 3, DAY_S, "a GPU far under the fleet median, again and again"),
)


@dataclass(frozen=True, slots=True)
class Observation:
    """One bad signal seen on a node at ``at_s`` (seconds, any epoch the caller keeps), on
    ``gpu`` (None: the node as a whole); ``journal_seq`` and ``journal_ms`` are the number the
    node's agent journal gave it (an XID) and the agent's own time of it, by which a replay of
    it is known (None: not journaled)."""

    signal: str
    at_s: float
    gpu: int | None = None
    journal_seq: int | None = None
    journal_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """The action called for, the rule that fired, and the evidence; ``at_s`` is the fault's
    time: when the strikes first sufficed for a removal that cannot wait (DRAIN_NOW or worse,
    by any rule that fires), else for this decision's own rule. A tenant stops paying for a node
    taken from it from then, not from a later strike, of this signal or another."""

    action: Action
    rule: Rule
    strikes: int
    gpu: int | None
    at_s: float

    @property
    def evidence(self) -> str:
        """The decision in words: the signal, the count and window, the rule's reason."""
        where = "the node" if self.gpu is None else f"GPU {self.gpu}"
        window = f"{self.rule.window_s / HOUR_S:g} h"
        return (
            f"{self.action.name}: {self.rule.signal} on {where}, {self.strikes} in {window}"
            f" (rule: {self.rule.strikes} in {window}; {self.rule.why})"
        )


# How far back any rule looks: the strikes older than this never count.
LONGEST_WINDOW_S = max(rule.window_s for rule in POLICY)


def signal_of_xid(code: int) -> str:
    """The signal an XID code counts as: its own when the policy names it, else ``xid:unknown``."""
    return xid(code) if xid(code) in _NAMED else XID_UNKNOWN


_NAMED = frozenset(rule.signal for rule in POLICY)


def decide(observations: Iterable[Observation], now_s: float, policy: Sequence[Rule] = POLICY) -> Decision | None:
    """The most severe action any rule of ``policy`` calls for at ``now_s``; None when none fires.

    Strikes are counted per GPU (a GPU's fault is that GPU's), and for the node as a whole;
    among rules of equal severity the one with the most strikes is the evidence."""
    counts: dict[tuple[str, int | None], list[float]] = {}
    for seen in observations:
        if seen.at_s <= now_s:
            counts.setdefault((seen.signal, seen.gpu), []).append(seen.at_s)
    for times in counts.values():
        times.sort()
    best: Decision | None = None
    removal_s = math.inf  # when a rule calling for DRAIN_NOW or worse first had its strikes
    for rule in policy:
        for (signal, gpu), times in counts.items():
            if signal != rule.signal:
                continue
            if rule.action >= Action.DRAIN_NOW:
                # A removal was called for from the first time this rule had its strikes, even
                # if its window has passed since (the controller held it, or heard late).
                removal_s = min(removal_s, _first_sufficed(times, rule))
            counted = _counted(times, now_s - rule.window_s, rule.spacing_s)
            if len(counted) < rule.strikes:
                continue
            sufficed_s = _first_sufficed(times, rule)
            decision = Decision(rule.action, rule, len(counted), gpu, sufficed_s)
            if best is None or (decision.action, decision.strikes) > (best.action, best.strikes):
                best = decision
    if best is not None and best.action >= Action.DRAIN_NOW:
        best = dataclasses.replace(best, at_s=removal_s)
    return best


def _first_sufficed(times: Sequence[float], rule: Rule) -> float:
    """The first of the ascending ``times`` at which ``rule`` had its strikes within its window
    (infinity: never)."""
    counted = _counted(times, -math.inf, rule.spacing_s)
    for i, at in enumerate(counted):
        if sum(1 for earlier in counted[: i + 1] if earlier >= at - rule.window_s) >= rule.strikes:
            return at
    return math.inf


def _counted(times: Sequence[float], since_s: float, spacing_s: float) -> list[float]:
    """The ascending ``times`` at or after ``since_s`` that count, each at least ``spacing_s``
    after the last one counted."""
    counted: list[float] = []
    for at in times:
        if at >= since_s and (not counted or at - counted[-1] >= spacing_s):
            counted.append(at)
    return counted

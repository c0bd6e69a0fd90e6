"""The health policy at fleet scale: a simulated month of faults and noise, judged by our policy
table and by a naive one (drain on any XID), in the same run.

    uv run python bench/health.py                  # 10,000 nodes, 30 days, seed 1
    uv run python bench/health.py --nodes 2000 --days 7 --seed 2

The fleet's real faults arrive at the rate Meta reported for Llama 3's 16,384 H100s (419
unplanned interruptions in 54 days: 0.0038 a node a day, about 38 a day on 10,000 nodes), with
their mix of causes, each as the signals such a fault shows (services/health/policy.py's
names): a GPU that fell off the bus (XID 79), HBM3 faults (double-bit ECC, XID 48, and row
remap failure, XID 64), GPU SRAM (XID 95), the GPU system processor (XID 119/120), NVLink or
fabric (XID 74, recurring), a GPU slowly dying (correctable ECC rising, report after report),
thermal (throttling that comes and goes). Many faults show their signal again later while the
node stays in service (intermittent hardware). Beside them, noise that is no fault of the node:
application XIDs (13, 31, 43) from tenants' code, a single missed heartbeat window, a transient
thermal throttle, a one-off correctable ECC rise.

Each policy sees every node's observations in time order and drains a node at the first
observation after which ``decide`` calls for a removal (drain after the job or worse). Printed
per policy: drains by the signal that decided, true drains (a real fault was active), false
drains (none was), faults missed (never drained in the window), the mean time from fault to
drain, and the GPU-hours each costs: a false drain takes 8 GPUs out for a repair turnaround
(24 h), a fault left in service breaks the work placed on its 8 GPUs until it is drained.
The safety limit (at most max(3, 10%) of a pool an hour) never binds at these rates and is
not modelled here.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "proto")]

from services.health import POLICY, Action, Observation, Rule, decide  # noqa: E402
from services.health.policy import (  # noqa: E402
    ECC_CORRECTABLE_RISING,
    MISSED_HEARTBEATS,
    THROTTLE_THERMAL,
    xid,
)

DAY_S = 86_400.0
HOUR_S = 3_600.0
GPUS_PER_NODE = 8
REPAIR_TURNAROUND_H = 24.0
# Llama 3 405B: 419 unplanned interruptions, 54 days, 2,048 nodes of 8 H100.
FAULTS_PER_NODE_DAY = 419 / 54 / 2048


@dataclass(frozen=True)
class FaultKind:
    """A real fault: its share of faults, the signal it shows (None: none this control plane
    sees), how often it shows it again while the node stays in service (0: once), its name."""

    name: str
    share: float
    signal: str | None
    repeat_every_h: float = 0.0


# Llama 3's causes, GPU-related ones by their signal; the rest (software bugs, host
# maintenance, ...) are not node faults this control plane can see, and are left out.
FAULTS = (
    FaultKind("GPU off the bus", 0.301 * 0.5, xid(79)),
    FaultKind("faulty GPU (driver recovery)", 0.301 * 0.5, xid(154)),
    FaultKind("HBM3 double-bit ECC", 0.172 * 0.6, xid(48)),
    FaultKind("HBM3 row remap failure", 0.172 * 0.4, xid(64)),
    FaultKind("GPU SRAM", 0.045, xid(95)),
    FaultKind("GPU system processor", 0.041, xid(119)),
    FaultKind("NVLink / fabric", 0.084, xid(74), repeat_every_h=3.0),
    FaultKind("GPU wearing out (correctable ECC)", 0.02, ECC_CORRECTABLE_RISING, repeat_every_h=4.0),
    FaultKind("thermal (cooling)", 0.015, THROTTLE_THERMAL, repeat_every_h=0.15),
    FaultKind("silent data corruption", 0.014, None),
)


@dataclass(frozen=True)
class NoiseKind:
    """Signals that are no fault of the node: ``per_node_day`` times, each a burst of ``burst``
    observations on one GPU within ``burst_within_h``."""

    name: str
    signal: str
    per_node_day: float
    burst: int = 1
    burst_within_h: float = 0.0


NOISE = (
    NoiseKind("application XID 13 (tenant code)", xid(13), 0.05),
    NoiseKind("application XID 31 (page fault)", xid(31), 0.05),
    NoiseKind("application XID 43 (job killed)", xid(43), 0.05),
    NoiseKind("a tenant's job page-faulting on every retry", xid(31), 0.002, burst=3, burst_within_h=1.0),
    NoiseKind("a missed heartbeat window", MISSED_HEARTBEATS, 0.02),
    NoiseKind("a flapping top-of-rack switch", MISSED_HEARTBEATS, 0.001, burst=3, burst_within_h=1.0),
    NoiseKind("transient thermal throttle", THROTTLE_THERMAL, 0.05),
    NoiseKind("one correctable ECC rise", ECC_CORRECTABLE_RISING, 0.02),
)


@dataclass
class Node:
    """One node's month: its observations in time order, each marked whether its real fault
    showed it, and when that fault began (None: the node has none)."""

    observations: list[tuple[Observation, bool]] = field(default_factory=list)
    fault_at_s: float | None = None
    fault: FaultKind | None = None


def simulate(nodes: int, days: float, seed: int) -> list[Node]:
    """Every node's observations over ``days``, deterministic in ``seed``."""
    rng = random.Random(seed)
    horizon = days * DAY_S
    weights = [f.share for f in FAULTS]
    fleet = [Node() for _ in range(nodes)]
    for node in fleet:
        t = rng.expovariate(FAULTS_PER_NODE_DAY / DAY_S)
        if t < horizon:
            kind = rng.choices(FAULTS, weights)[0]
            gpu = rng.randrange(GPUS_PER_NODE)
            node.fault_at_s, node.fault = t, kind
            while kind.signal is not None and t < horizon:
                node.observations.append((Observation(kind.signal, t, gpu), True))
                if not kind.repeat_every_h:
                    break
                t += rng.expovariate(1 / (kind.repeat_every_h * HOUR_S))
        for noise in NOISE:
            t = rng.expovariate(noise.per_node_day / DAY_S)
            while t < horizon:
                gpu = rng.randrange(GPUS_PER_NODE)
                for k in range(noise.burst):
                    at = t + k * noise.burst_within_h * HOUR_S / noise.burst
                    node.observations.append((Observation(noise.signal, at, gpu), False))
                t += rng.expovariate(noise.per_node_day / DAY_S)
        node.observations.sort(key=lambda seen: seen[0].at_s)
    return fleet


def naive_policy() -> tuple[Rule, ...]:
    """Drain at once on any XID, the rule a first health checker often is."""
    signals = {f.signal for f in FAULTS if f.signal is not None} | {n.signal for n in NOISE}
    return tuple(Rule(s, Action.DRAIN_NOW, 1, DAY_S, "any XID") for s in sorted(signals) if s.startswith("xid:"))


@dataclass
class Outcome:
    """What one policy did to the fleet."""

    drains_by_signal: Counter[str] = field(default_factory=Counter)
    true_drains: int = 0
    false_drains: int = 0
    missed: int = 0
    delays_h: list[float] = field(default_factory=list)
    faulty_gpu_hours: float = 0.0

    @property
    def drains(self) -> int:
        return self.true_drains + self.false_drains

    @property
    def false_drain_gpu_hours(self) -> float:
        return self.false_drains * GPUS_PER_NODE * REPAIR_TURNAROUND_H


def judge(fleet: Sequence[Node], policy: Sequence[Rule], horizon_s: float) -> Outcome:
    """Replay every node's observations through ``policy``. A node is drained at the first
    observation after which a removal is called for; it comes back after the repair
    turnaround with its strikes cleared (a return to service), its fault fixed if it had one
    by then; what it shows while out of service is not seen."""
    outcome = Outcome()
    for node in fleet:
        history: list[Observation] = []
        back_at, fixed_at = 0.0, None
        for seen, of_fault in node.observations:
            if seen.at_s < back_at or (of_fault and fixed_at is not None):
                continue
            history.append(seen)
            decision = decide(history, seen.at_s, policy)
            if decision is None or decision.action < Action.DRAIN_AFTER_JOB:
                continue
            outcome.drains_by_signal[decision.rule.signal] += 1
            if node.fault_at_s is not None and fixed_at is None and node.fault_at_s <= seen.at_s:
                outcome.true_drains += 1
                outcome.delays_h.append((seen.at_s - node.fault_at_s) / HOUR_S)
                fixed_at = seen.at_s
            else:
                outcome.false_drains += 1
            history, back_at = [], seen.at_s + REPAIR_TURNAROUND_H * HOUR_S
        if node.fault_at_s is not None:
            if fixed_at is None:
                outcome.missed += 1
            outcome.faulty_gpu_hours += GPUS_PER_NODE * ((fixed_at or horizon_s) - node.fault_at_s) / HOUR_S
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    began = time.perf_counter()
    fleet = simulate(args.nodes, args.days, args.seed)
    faults = Counter(node.fault.name for node in fleet if node.fault is not None)
    noise = sum(1 for node in fleet for _, of_fault in node.observations if not of_fault)
    print(
        f"{args.nodes:,} nodes, {args.days:g} days, seed {args.seed}: {sum(faults.values()):,} real faults,"
        f" {noise:,} noise observations"
    )
    for name, count in faults.most_common():
        print(f"  {count:6,}  {name}")
    horizon = args.days * DAY_S
    results = {
        "ours (policy.py)": judge(fleet, POLICY, horizon),
        "naive (drain on any XID)": judge(fleet, naive_policy(), horizon),
    }
    print()
    header = f"{'policy':26} {'drains':>7} {'true':>6} {'false':>6} {'missed':>7} {'mean delay':>11}"
    header += f" {'GPU-h lost: false drains':>25} {'faults in service':>18}"
    print(header)
    for name, outcome in results.items():
        delay = sum(outcome.delays_h) / len(outcome.delays_h) if outcome.delays_h else 0.0
        print(
            f"{name:26} {outcome.drains:7,} {outcome.true_drains:6,} {outcome.false_drains:6,} {outcome.missed:7,}"
            f" {delay:9.1f} h {outcome.false_drain_gpu_hours:25,.0f} {outcome.faulty_gpu_hours:18,.0f}"
        )
    for name, outcome in results.items():
        print(f"\ndrains by the signal that decided, {name}:")
        for signal, count in outcome.drains_by_signal.most_common():
            print(f"  {count:6,}  {signal}")
    print(f"\n({time.perf_counter() - began:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

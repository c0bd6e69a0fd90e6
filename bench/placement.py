"""A training cluster's job stream replayed under each placement policy.

    uv run python bench/placement.py [--nodes 1000] [--block 16] [--jobs 12000] [--load 0.9]
                                     [--seed 1] [--policies first-fit,best-fit,...] [--plot PNG]

One seeded stream of jobs arrives at a fleet of 8-GPU nodes grouped in fabric blocks: GPUs on
one node (1, 2, 4 or 8) and whole-node gangs of 2 to 16 nodes, Poisson arrivals at the offered
load asked for (GPU-hours asked over GPU-hours the fleet has), log-normal durations. Each policy
of the scheduling package replays the same stream through one queue: at every arrival and
departure the scheduler tries the waiting jobs in arrival order and starts each that fits
(later jobs may start ahead of an earlier one that does not fit: backfill without a
reservation). A gang needs idle nodes: the policy chooses them, inside one block when a block
holds them, else across blocks in fabric order (counted as split: its traffic crosses block
uplinks).

Printed per policy: GPU utilization (time-weighted allocated share), mean and p95 wait (all
jobs, and gangs of 8 nodes or more); averaged over time, the largest free block, the stranded
GPUs (free GPUs on nodes where no job shape of the stream fits: with one-GPU jobs in the
stream, only a node whose CPU or memory ran out strands any) and the scattered GPUs (free GPUs
on nodes partly in use, which no gang can take); the gangs split across blocks; and decisions
per second (a decision is one policy call, a placement or a refusal).
``--plot`` draws the largest free block and the queue over time, one line per policy.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from scheduling import (  # noqa: E402  (the path above first: bench/ would shadow the packages)
    POLICIES,
    Cluster,
    Gpus,
    NodeSpec,
    Placement,
    WholeNodes,
    apply,
    free_gpus,
    free_nodes,
    largest_free_block,
    release,
    shape_of,
    stranded_gpus,
    workload_mix,
)

GPUS_PER_NODE = 8
NODE_CPU_MILLI = 192_000
NODE_MEMORY_MIB = 2_097_152
# A single-node job's CPU and memory per GPU: a node's share per GPU, so CPU never binds first.
CPU_PER_GPU = NODE_CPU_MILLI // GPUS_PER_NODE // 2
MEMORY_PER_GPU = NODE_MEMORY_MIB // GPUS_PER_NODE // 2
# The mix by count: (kind, size, weight); "gpus" is GPUs on one node, "nodes" a whole-node gang.
MIX = (
    ("gpus", 1, 0.35),
    ("gpus", 2, 0.15),
    ("gpus", 4, 0.15),
    ("gpus", 8, 0.15),
    ("nodes", 2, 0.08),
    ("nodes", 4, 0.06),
    ("nodes", 8, 0.04),
    ("nodes", 16, 0.02),
)
MEDIAN_HOURS = 1.0
SIGMA = 1.0
# Waiting jobs tried per scheduling pass: a queue thousands long is tried from its head.
SCAN = 64
# How often the fragmentation measures are sampled, in simulated hours.
SAMPLE_HOURS = 0.25
BIG_GANG = 8


@dataclass(frozen=True)
class Job:
    """One job of the stream: when it arrives, what it asks for, how long it runs."""

    number: int
    arrival_h: float
    request: WholeNodes | Gpus
    hours: float

    @property
    def gpus(self) -> int:
        request = self.request
        return request.count * GPUS_PER_NODE if isinstance(request, WholeNodes) else request.count


def fleet(nodes: int, block: int) -> list[NodeSpec]:
    """``nodes`` H100 nodes, ``block`` to a fabric block, 4 to a rack."""
    return [
        NodeSpec(
            f"n{i:05d}",
            "H100",
            GPUS_PER_NODE,
            NODE_CPU_MILLI,
            NODE_MEMORY_MIB,
            zone="z0",
            block=f"b{i // block:04d}",
            rack=f"r{i // 4:05d}",
            leaf_switch=f"l{i // block:04d}",
        )
        for i in range(nodes)
    ]


def stream(count: int, nodes: int, load: float, seed: int) -> list[Job]:
    """``count`` jobs whose GPU-hours asked come to ``load`` of what ``nodes`` nodes have."""
    rng = random.Random(seed)
    kinds = [(kind, size) for kind, size, _ in MIX]
    weights = [weight for _, _, weight in MIX]
    mean_gpus = sum(w * (s * GPUS_PER_NODE if k == "nodes" else s) for k, s, w in MIX)
    mean_hours = MEDIAN_HOURS * math.exp(SIGMA**2 / 2)
    per_hour = load * nodes * GPUS_PER_NODE / (mean_gpus * mean_hours)
    jobs, now = [], 0.0
    for number in range(count):
        now += rng.expovariate(per_hour)
        kind, size = rng.choices(kinds, weights)[0]
        tenant = f"t{rng.randrange(20)}"
        request: WholeNodes | Gpus = (
            WholeNodes(tenant=tenant, count=size)
            if kind == "nodes"
            else Gpus(tenant=tenant, count=size, cpu_milli=size * CPU_PER_GPU, memory_mib=size * MEMORY_PER_GPU)
        )
        jobs.append(Job(number, now, request, rng.lognormvariate(math.log(MEDIAN_HOURS), SIGMA)))
    return jobs


@dataclass
class Replay:
    """What one policy did with the stream."""

    policy: str
    waits_h: list[float] = field(default_factory=list)
    big_gang_waits_h: list[float] = field(default_factory=list)
    split_gangs: int = 0
    gangs: int = 0
    decisions: int = 0
    deciding_s: float = 0.0
    busy_gpu_h: float = 0.0
    span_h: float = 0.0
    # (hours, largest free block, stranded GPUs, GPUs free on busy nodes, jobs waiting)
    samples: list[tuple[float, int, float, int, int]] = field(default_factory=list)

    @property
    def utilization(self) -> float:
        return self.busy_gpu_h / self.span_h if self.span_h else 0.0


def replay(policy_name: str, specs: list[NodeSpec], jobs: list[Job]) -> Replay:
    """The stream through one queue under ``policy_name``, until the last job has started."""
    policy = POLICIES[policy_name]
    shapes = [shape for job in jobs if (shape := shape_of(job.request)) is not None]
    cluster = Cluster(specs, workload=workload_mix(shapes))
    block_of = {spec.node_id: spec.block for spec in specs}
    out = Replay(policy_name)
    departures: list[tuple[float, int, Placement]] = []
    waiting: list[Job] = []
    arrivals = iter(jobs)
    upcoming: Job | None = next(arrivals, None)
    now = busy = 0.0
    started = 0
    next_sample = 0.0

    def advance(to: float) -> None:
        nonlocal now
        out.busy_gpu_h += busy * (to - now)
        now = to

    def schedule() -> None:
        nonlocal busy, started
        refused: set[tuple[str, int]] = set()
        kept: list[Job] = []
        for index, job in enumerate(waiting):
            shape = (type(job.request).__name__, job.gpus)
            # A shape no node can take now refuses every job as big or bigger: skip the call.
            if index >= SCAN or any(kind == shape[0] and size <= shape[1] for kind, size in refused):
                kept.append(job)
                continue
            began = time.perf_counter()
            placed = policy(cluster, job.request)
            out.deciding_s += time.perf_counter() - began
            out.decisions += 1
            if placed is None:
                refused.add(shape)
                kept.append(job)
                continue
            apply(cluster, placed)
            busy += job.gpus / (len(specs) * GPUS_PER_NODE)
            started += 1
            wait = now - job.arrival_h
            out.waits_h.append(wait)
            if isinstance(job.request, WholeNodes):
                out.gangs += 1
                out.split_gangs += len({block_of[node] for node in placed.nodes}) > 1
                if job.request.count >= BIG_GANG:
                    out.big_gang_waits_h.append(wait)
            heapq.heappush(departures, (now + job.hours, job.number, placed))
        waiting[:] = kept

    while started < len(jobs):
        next_departure = departures[0][0] if departures else math.inf
        next_arrival = upcoming.arrival_h if upcoming is not None else math.inf
        if next_arrival <= next_departure:
            assert upcoming is not None
            advance(next_arrival)
            waiting.append(upcoming)
            upcoming = next(arrivals, None)
        else:
            advance(next_departure)
            _, number, placed = heapq.heappop(departures)
            release(cluster, placed)
            busy -= jobs[number].gpus / (len(specs) * GPUS_PER_NODE)
        schedule()
        while next_sample <= now:
            scattered = free_gpus(cluster) - GPUS_PER_NODE * free_nodes(cluster)
            out.samples.append(
                (next_sample, largest_free_block(cluster), stranded_gpus(cluster), scattered, len(waiting))
            )
            next_sample += SAMPLE_HOURS
    out.span_h = now
    return out


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else (values[0] if values else 0.0)


def report(replays: list[Replay], block: int) -> None:
    print(
        f"{'policy':<12} {'util':>6} {'wait mean':>10} {'wait p95':>9} {'gang>=8 p95':>12}"
        f" {'free block':>11} {'stranded':>9} {'scattered':>10} {'split':>7} {'dec/s':>8}"
    )
    for r in replays:
        blocks = [s[1] for s in r.samples]
        stranded = [s[2] for s in r.samples]
        scattered = [s[3] for s in r.samples]
        print(
            f"{r.policy:<12} {r.utilization:>6.1%} {statistics.fmean(r.waits_h) * 60:>8.1f} m"
            f" {p95(r.waits_h) * 60:>7.1f} m {p95(r.big_gang_waits_h) * 60:>10.1f} m"
            f" {statistics.fmean(blocks):>6.1f} of {block:<2} {statistics.fmean(stranded):>9.1f}"
            f" {statistics.fmean(scattered):>10.0f}"
            f" {r.split_gangs / max(r.gangs, 1):>7.1%} {r.decisions / r.deciding_s:>8,.0f}"
        )


def plot(replays: list[Replay], path: Path, block: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for r in replays:
        hours = [s[0] for s in r.samples]
        top.plot(hours, [s[1] for s in r.samples], label=r.policy, linewidth=1)
        bottom.plot(hours, [s[4] for s in r.samples], label=r.policy, linewidth=1)
    top.set_ylabel(f"largest free block (nodes of {block})")
    bottom.set_ylabel("jobs waiting")
    bottom.set_xlabel("simulated hours")
    top.legend(loc="upper right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--block", type=int, default=16, help="nodes to a fabric block")
    parser.add_argument("--jobs", type=int, default=12_000)
    parser.add_argument("--load", type=float, default=0.9, help="GPU-hours asked over GPU-hours the fleet has")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    names = [name for name in args.policies.split(",") if name]
    unknown = [name for name in names if name not in POLICIES]
    if unknown:
        parser.error(f"unknown policies {unknown}; known: {', '.join(POLICIES)}")
    specs = fleet(args.nodes, args.block)
    jobs = stream(args.jobs, args.nodes, args.load, args.seed)
    print(
        f"{args.jobs:,} jobs on {args.nodes:,} nodes of {GPUS_PER_NODE} GPUs in blocks of {args.block},"
        f" offered load {args.load:.0%}, seed {args.seed}; arrivals over {jobs[-1].arrival_h:.1f} h"
    )
    replays = []
    for name in names:
        began = time.perf_counter()
        replays.append(replay(name, specs, jobs))
        print(f"  {name}: replayed in {time.perf_counter() - began:.1f} s", flush=True)
    report(replays, args.block)
    if args.plot is not None:
        plot(replays, args.plot, args.block)


if __name__ == "__main__":
    main()

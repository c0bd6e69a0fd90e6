"""The placement policies on a production trace: Alibaba's openb GPU cluster (bench/data/openb/),
replayed by the method of the FGD paper (Weng et al., "Beware of Fragmentation", USENIX ATC '23).

    uv run python bench/openb.py                                  # default trace, every policy, 10 seeds
    uv run python bench/openb.py --pods bench/data/openb/openb_pod_list_gpushare100.csv
    uv run python bench/openb.py --seeds 2 --policies best-fit,fgd --plot /tmp/openb.png
    uv run python bench/openb.py --latency-nodes 10000            # also time decisions on a 10,000-node fleet

Options: --pods FILE and --nodes FILE (CSV in the openb format), --seeds N (from --first-seed,
0 by default), --policies a,b (names from scheduling.POLICIES), --plot PATH (PNG of allocation
rate against arrived workload), --latency-nodes N (0: skip the latency table).

What is measured: for each seed, every task of the trace plus tasks drawn from it at random
(with replacement, by the seed) until the GPU demand drawn would pass 130% of the cluster's GPU
capacity, in an order shuffled by the seed. Tasks arrive one at a time and never finish; a task
no node can take fails and the replay goes on. The allocation rate is the allocated share of all
GPU capacity (soft shares counted in thousandths), read when the arrived demand first reaches
100% of capacity and at the end (130%): the mean over seeds and its spread (min-max), beside
the paper's published means where the trace is one the paper ran. One tenant submits every
task, as the trace has none (tenants never share a GPU, which would change the problem).

The cluster's expected workload is the trace's own mix of GPU task shapes (CPU, memory, GPU
thousandths, GPU count); FGD weighs fragmentation against its typical shapes as the paper
does (the most frequent, ten at a time, until they cover 60% of the GPU tasks).

Decisions per second is each policy's decisions over the seconds spent inside the policy
function (applying a placement not counted). The latency table times single decisions on a
fleet of N nodes (the trace's nodes repeated), half filled by a best-fit replay first.
"""

from __future__ import annotations

import argparse
import csv
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from scheduling import (  # noqa: E402
    POLICIES,
    Cluster,
    CpuOnly,
    Gpus,
    NodeSpec,
    Policy,
    Request,
    Share,
    WorkloadMix,
    apply,
    shape_of,
    typical,
    workload_mix,
)

DATA = ROOT / "bench" / "data" / "openb"
TARGET = 1.3
TENANT = "openb"
CURVE_STEP_PCT = 1

# The paper's published GPU allocation rate (%, mean of 10 seeds) at 100% arrived and at the end,
# from its simulator's expected results, for the traces this bench ships.
PAPER: dict[str, dict[str, tuple[float, float]]] = {
    "openb_pod_list_default": {"best-fit": (92.86, 93.08), "fgd": (95.23, 95.39)},
    "openb_pod_list_gpushare100": {"best-fit": (84.62, 85.01), "fgd": (86.64, 86.90)},
}


@dataclass(frozen=True)
class Task:
    """A trace row as a request, with the GPU thousandths it asks for in all."""

    request: Request
    gpu_milli: int


def load_nodes(path: Path) -> list[NodeSpec]:
    """The trace's nodes; the trace has no fabric, so fabric order is node id order."""
    with path.open(newline="") as f:
        return [
            NodeSpec(row["sn"], row["model"], int(row["gpu"]), int(row["cpu_milli"]), int(row["memory_mib"]))
            for row in csv.DictReader(f)
        ]


def _request(row: dict[str, str]) -> Task:
    gpus, milli = int(row["num_gpu"]), int(row["gpu_milli"])
    models = tuple(m for m in (row.get("gpu_spec") or "").split("|") if m)
    cpu, memory = int(row["cpu_milli"]), int(row["memory_mib"])
    if gpus == 0 or milli == 0:
        return Task(CpuOnly(tenant=TENANT, cpu_milli=cpu, memory_mib=memory), 0)
    if gpus == 1 and milli < 1000:
        return Task(Share(tenant=TENANT, cpu_milli=cpu, memory_mib=memory, models=models, milli=milli), milli)
    return Task(Gpus(tenant=TENANT, cpu_milli=cpu, memory_mib=memory, models=models, count=gpus), 1000 * gpus)


def load_tasks(path: Path) -> list[Task]:
    """The trace's tasks as requests."""
    with path.open(newline="") as f:
        return [_request(row) for row in csv.DictReader(f)]


def arrivals(trace: Sequence[Task], capacity_milli: int, seed: int) -> list[Task]:
    """Every trace task, then draws from the trace until the next would pass 130% of capacity;
    shuffled. Deterministic in ``seed``."""
    rng = random.Random(seed)
    tasks = list(trace)
    demand = sum(t.gpu_milli for t in tasks)
    while True:
        task = rng.choice(trace)
        if demand + task.gpu_milli > TARGET * capacity_milli:
            break
        tasks.append(task)
        demand += task.gpu_milli
    rng.shuffle(tasks)
    return tasks


def trace_mix(trace: Sequence[Task]) -> WorkloadMix:
    """The trace's GPU task shapes as they occur: the cluster's expected workload."""
    return workload_mix(s for t in trace if (s := shape_of(t.request)) is not None)


@dataclass
class Run:
    """One policy's replay of one seed's arrivals."""

    at_full: float = 0.0
    final: float = 0.0
    failed: int = 0
    decisions: int = 0
    policy_s: float = 0.0
    curve: list[float] = field(default_factory=list)  # allocation rate at each CURVE_STEP_PCT of arrivals


def replay(nodes: Sequence[NodeSpec], mix: WorkloadMix, tasks: Sequence[Task], policy: Policy) -> Run:
    """Place ``tasks`` in order with ``policy``; none finishes."""
    cluster = Cluster(nodes, mix)
    capacity = 1000 * sum(n.gpus for n in nodes)
    run, arrived, next_pct = Run(), 0, 0
    for task in tasks:
        began = time.perf_counter()
        placed = policy(cluster, task.request)
        run.policy_s += time.perf_counter() - began
        run.decisions += 1
        if placed is None:
            run.failed += 1
        else:
            apply(cluster, placed)
        arrived += task.gpu_milli
        while 100 * arrived >= next_pct * capacity:
            run.curve.append(cluster.allocated_gpu_share())
            next_pct += CURVE_STEP_PCT
        if not run.at_full and arrived >= capacity:
            run.at_full = cluster.allocated_gpu_share()
    run.final = cluster.allocated_gpu_share()
    return run


def _spread(values: Sequence[float]) -> str:
    return f"{100 * statistics.fmean(values):6.2f} ({100 * min(values):.2f}-{100 * max(values):.2f})"


def report(trace: str, policies: Sequence[str], runs: dict[str, list[Run]], seeds: int) -> None:
    """The allocation table, our means beside the paper's."""
    paper = PAPER.get(trace, {})
    print(f"\n{trace}: GPU allocation rate (%), mean of {seeds} seed(s) (min-max); paper's mean of 10")
    columns = (("at 100% arrived", 22), ("paper", 6), ("at the end", 22), ("paper", 6), ("failed", 7), ("dec/s", 8))
    print(f"{'policy':<12}" + "".join(f" {name:>{width}}" for name, width in columns))
    for name in policies:
        rs = runs[name]
        full, end = (f"{x:6.2f}" for x in paper[name]) if name in paper else ("-", "-")
        rate = sum(r.decisions for r in rs) / sum(r.policy_s for r in rs)
        failed = statistics.fmean(r.failed for r in rs)
        print(
            f"{name:<12} {_spread([r.at_full for r in rs]):>22} {full:>6} {_spread([r.final for r in rs]):>22}"
            f" {end:>6} {failed:7.0f} {rate:8,.0f}"
        )


def plot(path: Path, trace: str, runs: dict[str, list[Run]]) -> None:
    """Allocation rate against arrived workload, one line per policy (the mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rs in runs.items():
        points = min(len(r.curve) for r in rs)
        mean = [100 * statistics.fmean(r.curve[i] for r in rs) for i in range(points)]
        ax.plot([i * CURVE_STEP_PCT for i in range(points)], mean, label=name)
    ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=1, label="all placed")
    ax.set_xlabel("arrived workload (% of cluster GPU capacity)")
    ax.set_ylabel("GPU allocation rate (%)")
    ax.set_title(f"{trace}: allocation rate, mean of {len(next(iter(runs.values())))} seeds")
    ax.set_xlim(70, 100 * TARGET)
    ax.set_ylim(80, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def latency(
    nodes: Sequence[NodeSpec], trace: Sequence[Task], mix: WorkloadMix, size: int, policies: Sequence[str]
) -> None:
    """Median and p99 of single decisions on ``size`` nodes, half filled by best fit."""
    fleet = [
        NodeSpec(f"{n.node_id}-{i // len(nodes)}", n.model, n.gpus, n.cpu_milli, n.memory_mib)
        for i, n in enumerate(nodes[j % len(nodes)] for j in range(size))
    ]
    cluster = Cluster(fleet, mix)
    capacity = 1000 * sum(n.gpus for n in fleet)
    rng = random.Random(0)
    arrived = 0
    while arrived < capacity // 2:
        task = rng.choice(trace)
        placed = POLICIES["best-fit"](cluster, task.request)
        if placed is not None:
            apply(cluster, placed)
        arrived += task.gpu_milli
    probes = [rng.choice(trace).request for _ in range(200)]
    print(f"\ndecision latency on {size:,} nodes half filled ({len(probes)} requests from the trace, not applied)")
    print(f"{'policy':<12} {'median ms':>10} {'p99 ms':>8}")
    for name in policies:
        times = []
        for request in probes:
            began = time.perf_counter()
            POLICIES[name](cluster, request)
            times.append(1000 * (time.perf_counter() - began))
        times.sort()
        print(f"{name:<12} {statistics.median(times):10.2f} {times[int(0.99 * (len(times) - 1))]:8.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=Path, default=DATA / "openb_pod_list_default.csv")
    parser.add_argument("--nodes", type=Path, default=DATA / "openb_node_list_gpu_node.csv")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds run from this one: 10 for seeds no policy was tuned on"
    )
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--latency-nodes", type=int, default=0)
    args = parser.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    unknown = sorted(set(policies) - set(POLICIES))
    if unknown:
        parser.error(f"unknown policies {unknown}; known: {', '.join(POLICIES)}")
    began = time.perf_counter()
    nodes, trace = load_nodes(args.nodes), load_tasks(args.pods)
    mix = trace_mix(trace)
    capacity = 1000 * sum(n.gpus for n in nodes)
    demand = sum(t.gpu_milli for t in trace)
    print(
        f"openb replay: {len(nodes):,} nodes, {capacity // 1000:,} GPUs; {len(trace):,} tasks in the trace"
        f" ({100 * demand / capacity:.1f}% of GPU capacity), drawn up to {100 * TARGET:.0f}%;"
        f" task shapes: {len(mix.shapes)}, {len(typical(mix).shapes)} of them typical"
    )
    runs: dict[str, list[Run]] = {name: [] for name in policies}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        tasks = arrivals(trace, capacity, seed)
        for name in policies:
            runs[name].append(replay(nodes, mix, tasks, POLICIES[name]))
    report(args.pods.stem, policies, runs, args.seeds)
    if args.plot is not None:
        plot(args.plot, args.pods.stem, runs)
        print(f"\nplot: {args.plot}")
    if args.latency_nodes:
        latency(nodes, trace, mix, args.latency_nodes, policies)
    print(f"\n({time.perf_counter() - began:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

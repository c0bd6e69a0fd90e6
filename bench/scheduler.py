"""The scheduling cycle's decision at fleet scale: one model's queue over a large pool.

    uv run python bench/scheduler.py [--nodes 10000] [--queued 1000] [--busy 0.5] [--part-node 0.5]
                                     [--cycles 10] [--policies first-fit,best-fit,fgd-refined] [--seed 0]

Each cycle builds the pool of free nodes (``Pool``, as the server does from the store's rows:
zones of racks of 4 nodes, a leaf switch per 8), with ``--busy`` of the fleet already held, and
hands ``queue.plan`` a queue of ``--queued`` allocations in admission order: ``--part-node`` of
them part of one node (1, 2, 4 or 8 GPUs, a MIG slice or a soft share, in equal parts), the
rest 1 to 8 whole nodes (one in ten a gang of 16 to 64). Part-node ones start with no node
shared, so each cycle opens the nodes they pack onto. Printed per policy: the pool's build,
the plan (every decision: admissions, and the reasons of everything left waiting), how many
were admitted (whole and part-node), and the cycle's time per admitted allocation (build and
plan over admissions), median and spread over the cycles. The goal is under 10 ms median per
admitted allocation at 10,000 nodes and 1,000 queued. The database's reads and writes of a
cycle are not in these figures.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import scheduling  # noqa: E402  (the path above first: bench/ would shadow the packages)
from services.allocations.placement import Candidate, Pool  # noqa: E402
from services.allocations.queue import plan  # noqa: E402
from services.allocations.repository import Allocation  # noqa: E402

GOAL_MS = 10.0


def candidates(nodes: int, busy: float, rng: random.Random) -> list[Candidate]:
    """The free nodes of a fleet of ``nodes`` with ``busy`` of them held, in fabric order."""
    fleet = [
        Candidate(f"zone-{i // 2500}", f"rack-{i // 4:05d}", f"leaf-{i // 8:05d}", f"node-{i:05d}")
        for i in range(nodes)
    ]
    held = set(rng.sample(range(nodes), int(nodes * busy)))
    return [c for i, c in enumerate(fleet) if i not in held]


def queue_of(queued: int, part_node: float, rng: random.Random) -> list[Allocation]:
    """``queued`` PENDING allocations in admission order, ``part_node`` of them part of one node."""
    rows = []
    for i in range(queued):
        name, tenant = f"alloc-{i:05d}", f"tenant-{i % 37}"
        if rng.random() < part_node:
            shape = rng.choice([{"gpus": 1}, {"gpus": 2}, {"gpus": 4}, {"gpus": 8}, {"mig": 1}, {"share": 1}])
            rows.append(
                Allocation(
                    name,
                    tenant,
                    "H100",
                    0,
                    "PENDING",
                    i,
                    gpus=shape.get("gpus", 0),
                    mig_profile=rng.choice(list(scheduling.PROFILES)) if "mig" in shape else "",
                    share_milli=rng.randint(1, 999) if "share" in shape else 0,
                    cpu_milli=rng.choice([0, 4_000, 16_000]),
                    memory_mib=rng.choice([0, 65_536]),
                )
            )
            continue
        size = rng.randint(16, 64) if rng.random() < 0.1 else rng.randint(1, 8)
        rows.append(Allocation(name, tenant, "H100", size, "PENDING", i))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--queued", type=int, default=1_000)
    parser.add_argument("--busy", type=float, default=0.5)
    parser.add_argument("--part-node", type=float, default=0.5)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--policies", default="first-fit,best-fit,fgd-refined")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"{args.nodes} nodes, {args.busy:.0%} held, {args.queued} queued ({args.part_node:.0%} part of one node),"
        f" {args.cycles} cycles a policy"
        f" (seeds {args.seed}-{args.seed + args.cycles - 1})"
    )
    print(f"{'policy':<12} {'build ms':>9} {'plan ms':>9} {'admitted':>9} {'ms/admitted':>12} {'spread':>16}")
    for name in args.policies.split(","):
        policy = scheduling.POLICIES[name]
        builds, plans, admitted, per_admitted = [], [], [], []
        for cycle in range(args.cycles):
            rng = random.Random(args.seed + cycle)
            free, queued = candidates(args.nodes, args.busy, rng), queue_of(args.queued, args.part_node, rng)
            started = time.perf_counter()
            pool = Pool(free)
            built = time.perf_counter()
            made = plan(queued, pool, policy=policy, keep=0, fleet_nodes=args.nodes, fleet_block=8)
            planned = time.perf_counter()
            builds.append((built - started) * 1e3)
            plans.append((planned - built) * 1e3)
            admitted.append(len(made.admitted) + len(made.parts))
            per_admitted.append((planned - started) * 1e3 / max(admitted[-1], 1))
        median = statistics.median(per_admitted)
        print(
            f"{name:<12} {statistics.median(builds):>9.1f} {statistics.median(plans):>9.1f}"
            f" {statistics.median(admitted):>9.0f} {median:>12.3f}"
            f" {min(per_admitted):>7.3f}-{max(per_admitted):<8.3f}"
            f" {'meets' if median < GOAL_MS else 'MISSES'} the {GOAL_MS:g} ms goal"
        )


if __name__ == "__main__":
    main()

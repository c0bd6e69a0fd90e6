"""The allocation-policies suite: each function's choice on small clusters built by hand and on
random ones against the property that defines it, and a replayed job stream on which best fit
keeps a larger largest free block than worst fit.

A cluster is a list of the implementation's own ``Node(gpus, free, block)``, in fabric order,
each block's nodes next to one another. What a right answer is, the suite works out on plain
tuples of ``(gpus, free, block)``.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from exercises.harness import Implementation, Mistake, needs, under_test

impl = under_test()
FIRST, BEST, WORST = "first_fit", "best_fit", "worst_fit"
GANG, LARGEST = "place_gang", "largest_free_block"
POLICIES = (FIRST, BEST, WORST)
# The GPUs a job takes on one node.
SIZES = (1, 2, 4, 8)
GPUS_PER_NODE = 8

Shape = tuple[int, int, int]  # (gpus, free, block) of one node


def fleet(*blocks: Sequence[int]) -> list[Shape]:
    """8-GPU nodes, block after block, each given by its free GPUs: ``fleet([8, 3], [8])`` is two
    nodes in block 0 (one idle, one with 3 free) and an idle node in block 1."""
    return [(GPUS_PER_NODE, free, block) for block, frees in enumerate(blocks) for free in frees]


def nodes_of(impl: Implementation, shape: Sequence[Shape]) -> list[Any]:
    """The implementation's nodes for ``shape``."""
    return [impl.Node(gpus=gpus, free=free, block=block) for gpus, free, block in shape]


def idle(node: Shape) -> bool:
    return node[1] == node[0]


def fitting(shape: Sequence[Shape], gpus: int) -> list[int]:
    """The nodes with at least ``gpus`` free, in order."""
    return [i for i, (_, free, _) in enumerate(shape) if free >= gpus]


def right_policy(policy: str, shape: Sequence[Shape], gpus: int) -> int | None:
    """First fit: the first node that fits. Best fit: the one left with the fewest free GPUs,
    worst fit the most; ties to the first in order. None when none fits."""
    fits = fitting(shape, gpus)
    if not fits:
        return None
    if policy == FIRST:
        return fits[0]
    sign = 1 if policy == BEST else -1
    return min(fits, key=lambda i: (sign * shape[i][1], i))


def idle_by_block(shape: Sequence[Shape]) -> dict[int, list[int]]:
    """Each block's idle nodes, blocks in the order they come."""
    out: dict[int, list[int]] = {block: [] for _, _, block in shape}
    for i, node in enumerate(shape):
        if idle(node):
            out[node[2]].append(i)
    return out


def right_gang_block(shape: Sequence[Shape], count: int) -> int | None:
    """The block a gang of ``count`` goes to: among those with at least ``count`` idle nodes, the
    one with the fewest (ties to the first); None when no block has enough."""
    holding = [(len(nodes), block) for block, nodes in idle_by_block(shape).items() if len(nodes) >= count]
    return min(holding, key=lambda held: held[0])[1] if holding else None


def right_largest(shape: Sequence[Shape]) -> int:
    return max((len(nodes) for nodes in idle_by_block(shape).values()), default=0)


def gang_problem(shape: Sequence[Shape], count: int, answer: Sequence[int] | None) -> str | None:
    """What is wrong with ``answer`` as the gang of ``count`` on ``shape``, or None."""
    block = right_gang_block(shape, count)
    if block is None:
        return None if answer is None else f"no block has {count} idle nodes: None, not {answer}"
    if answer is None:
        return f"block {block} has {count} idle nodes, but the answer is None"
    chosen = list(answer)
    if len(chosen) != count or len(set(chosen)) != count:
        return f"{chosen} is not {count} distinct nodes"
    if not all(0 <= i < len(shape) for i in chosen):
        return f"{chosen}: no such node"
    busy = [i for i in chosen if not idle(shape[i])]
    if busy:
        return f"{chosen} takes nodes in use: {busy}"
    blocks = sorted({shape[i][2] for i in chosen})
    if blocks != [block]:
        return f"{chosen} lies in blocks {blocks}; the fullest block that holds {count} is {block}"
    return None


# The mistakes' probes: each a small input whose right answer the mistake changes.


def _answer(impl: Implementation, function: str, shape: Sequence[Shape], *args: int) -> Any:
    return getattr(impl, function)(nodes_of(impl, shape), *args)


def _best_fit_spreads(impl: Implementation) -> bool:
    return bool(_answer(impl, BEST, fleet([8, 2, 5]), 1) == 0)


def _first_fit_ignores_order(impl: Implementation) -> bool:
    return bool(_answer(impl, FIRST, fleet([2, 8, 1]), 1) != 0)


def _without_room(policy: str) -> Callable[[Implementation], bool]:
    def shows(impl: Implementation) -> bool:
        for shape, gpus in ((fleet([0, 8]), 4), (fleet([8, 3, 8]), 4), (fleet([1, 0]), 2)):
            chosen = _answer(impl, policy, shape, gpus)
            if chosen is not None and shape[chosen][1] < gpus:
                return True
        return False

    return shows


def _skips_an_exact_fit(policy: str) -> Callable[[Implementation], bool]:
    def shows(impl: Implementation) -> bool:
        # An exact fit first (first fit), or beside a node one GPU roomier (best fit).
        shape, passed_over = (fleet([2, 8]), 1) if policy == FIRST else (fleet([8, 2, 3]), 2)
        return bool(_answer(impl, policy, shape, 2) == passed_over)

    return shows


def _gang_across_blocks(impl: Implementation) -> bool:
    for shape, count in ((fleet([0, 0, 8], [8, 8, 8]), 2), (fleet([8, 8, 0], [8, 8, 0]), 3)):
        chosen = _answer(impl, GANG, shape, count)
        if chosen is not None and len({shape[i][2] for i in chosen}) > 1:
            return True
    return False


def _gang_on_busy_nodes(impl: Implementation) -> bool:
    shape = fleet([8, 7, 1])
    chosen = _answer(impl, GANG, shape, 2)
    return chosen is not None and any(not idle(shape[i]) for i in chosen)


def _gang_in_the_emptiest_block(impl: Implementation) -> bool:
    shape = fleet([8, 8, 0, 0], [8, 8, 8, 8])
    chosen = _answer(impl, GANG, shape, 2)
    return chosen is not None and {shape[i][2] for i in chosen} == {1}


def _counts_busy_nodes(impl: Implementation) -> bool:
    return bool(_answer(impl, LARGEST, fleet([8, 3, 3, 1])) != 1)


def _sums_across_blocks(impl: Implementation) -> bool:
    return bool(_answer(impl, LARGEST, fleet([8, 8], [8, 8, 8])) == 5)


WITHOUT_ROOM = (
    "a node is chosen only among those with at least the GPUs asked free: filter first, then take the"
    " first, the least left or the most left; a job never goes where it does not fit"
)
EXACT_FIT = (
    "a node with exactly the GPUs asked free fits (free >= gpus, not >): for best fit it is the best"
    " fit there is, leaving nothing stranded"
)

MISTAKES = [
    Mistake(
        "best_fit_spreads",
        "best fit takes the node left with the FEWEST free GPUs among those that fit: taking the most free"
        " is worst fit, which spreads small jobs over the idle nodes and leaves no block free for a gang",
        (BEST,),
        _best_fit_spreads,
    ),
    Mistake(
        "first_fit_ignores_order",
        "first fit takes the first node in the list's order that has enough free GPUs: the order is the"
        " fabric's, so do not sort the nodes (by free GPUs or anything else) before scanning",
        (FIRST,),
        _first_fit_ignores_order,
    ),
    *(Mistake("places_without_room", WITHOUT_ROOM, (p,), _without_room(p)) for p in POLICIES),
    *(Mistake("skips_an_exact_fit", EXACT_FIT, (p,), _skips_an_exact_fit(p)) for p in (FIRST, BEST)),
    Mistake(
        "gang_across_blocks",
        "a gang stays inside one fabric block: take all its nodes from a block with enough idle nodes, and"
        " answer None when no block has enough, even when the fleet does (its traffic would cross the"
        " blocks' uplinks)",
        (GANG,),
        _gang_across_blocks,
    ),
    Mistake(
        "gang_on_busy_nodes",
        "a gang takes whole idle nodes (free == gpus): a node with some GPUs free is in use, and no gang"
        " member goes there",
        (GANG,),
        _gang_on_busy_nodes,
    ),
    Mistake(
        "gang_in_the_emptiest_block",
        "pack gangs as best fit packs GPUs: the block with the FEWEST idle nodes that still holds the gang,"
        " so the blocks with the most idle nodes stay whole for the next big gang",
        (GANG,),
        _gang_in_the_emptiest_block,
    ),
    Mistake(
        "counts_busy_nodes",
        "the largest free block counts idle nodes only (free == gpus): a node with a single GPU in use"
        " cannot take a member of a gang",
        (LARGEST,),
        _counts_busy_nodes,
    ),
    Mistake(
        "sums_across_blocks",
        "the largest free block is the most idle nodes in ONE block (the largest gang that can start without"
        " crossing blocks), not the idle nodes of the whole fleet",
        (LARGEST,),
        _sums_across_blocks,
    ),
]


# Random clusters: up to 4 blocks of up to 6 nodes, each of 1 to 8 GPUs, idle half the time.


@st.composite
def clusters(draw: st.DrawFn) -> list[Shape]:
    shape: list[Shape] = []
    for block in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(1, 6))):
            gpus = draw(st.sampled_from((8, 8, 4, 2, 1)))
            free = draw(st.one_of(st.just(gpus), st.integers(0, gpus)))
            shape.append((gpus, free, block))
    return shape


def by_hand(function: str, cases: Sequence[tuple[list[Shape], int, int | None]]) -> None:
    for shape, gpus, right in cases:
        answer = _answer(impl, function, shape, gpus)
        assert answer == right, f"{function} of {gpus} GPU(s) on free {[f for _, f, _ in shape]}: {answer}, not {right}"


def against_the_rule(function: str, shape: list[Shape], gpus: int) -> None:
    answer = _answer(impl, function, shape, gpus)
    right = right_policy(function, shape, gpus)
    assert answer == right, f"{gpus} GPU(s) on {shape} (gpus, free, block): {answer}, not {right}"


@needs(FIRST)
def test_first_fit_by_hand() -> None:
    """First fit takes the first node in order with enough free GPUs, an exact fit included; None when none has."""
    by_hand(
        FIRST,
        [
            (fleet([2, 8, 1]), 1, 0),
            (fleet([1, 8, 2]), 2, 1),
            (fleet([1, 2, 8]), 2, 1),
            (fleet([0, 3], [4, 8]), 4, 2),
            (fleet([3, 1], [7]), 8, None),
        ],
    )


@needs(FIRST)
@given(clusters(), st.sampled_from(SIZES))
def test_first_fit_on_random_clusters(shape: list[Shape], gpus: int) -> None:
    """First fit, on random clusters: the first node in order with at least the GPUs asked free."""
    against_the_rule(FIRST, shape, gpus)


@needs(BEST)
def test_best_fit_by_hand() -> None:
    """Best fit takes the node left with the fewest free GPUs among those that fit; ties to the first.

    An exact fit is the best there is; a 4-GPU node with 4 free beats an 8-GPU node with 6."""
    by_hand(
        BEST,
        [
            (fleet([8, 2, 5]), 1, 1),
            (fleet([8, 2, 4]), 4, 2),
            (fleet([3, 8], [3]), 2, 0),
            ([(8, 6, 0), (4, 4, 0)], 4, 1),
            (fleet([0, 1], [3]), 4, None),
        ],
    )


@needs(BEST)
@given(clusters(), st.sampled_from(SIZES))
def test_best_fit_on_random_clusters(shape: list[Shape], gpus: int) -> None:
    """Best fit, on random clusters: the fewest free GPUs left among the nodes that fit, ties to order."""
    against_the_rule(BEST, shape, gpus)


@needs(WORST)
def test_worst_fit_by_hand() -> None:
    """Worst fit takes the node left with the most free GPUs; ties to the first; None when none fits."""
    by_hand(
        WORST,
        [
            (fleet([2, 8, 5]), 1, 1),
            (fleet([8, 3], [8]), 2, 0),
            ([(4, 4, 0), (8, 6, 0)], 4, 1),
            (fleet([3, 1]), 4, None),
        ],
    )


@needs(WORST)
@given(clusters(), st.sampled_from(SIZES))
def test_worst_fit_on_random_clusters(shape: list[Shape], gpus: int) -> None:
    """Worst fit, on random clusters: the most free GPUs left among the nodes that fit, ties to order."""
    against_the_rule(WORST, shape, gpus)


@needs(GANG)
def test_a_gang_by_hand() -> None:
    """A gang takes idle nodes of one block, the fullest block that holds it; None when no block does.

    Partly used nodes are not idle, and a fleet with enough idle nodes spread over blocks holds no gang."""
    cases = [
        (fleet([8, 8, 8, 8], [8, 8, 0, 0]), 2),
        (fleet([0, 0, 8], [8, 8, 8]), 2),
        (fleet([8, 8], [8, 8]), 2),
        (fleet([8, 7], [8, 3]), 2),
        (fleet([8, 8, 0], [8, 8, 0]), 3),
        (fleet([8, 8, 8]), 4),
        (fleet([8, 8, 8]), 3),
    ]
    for shape, count in cases:
        answer = _answer(impl, GANG, shape, count)
        problem = gang_problem(shape, count, answer)
        assert problem is None, f"a gang of {count} on free {[f for _, f, _ in shape]} (8 GPUs each): {problem}"


@needs(GANG)
@given(clusters(), st.integers(1, 5))
def test_a_gang_on_random_clusters(shape: list[Shape], count: int) -> None:
    """A gang, on random clusters: count idle nodes of the fullest block that holds them, or None."""
    answer = _answer(impl, GANG, shape, count)
    problem = gang_problem(shape, count, answer)
    assert problem is None, f"a gang of {count} on {shape} (gpus, free, block): {problem}"


@needs(LARGEST)
def test_the_largest_free_block_by_hand() -> None:
    """The largest free block is the most idle nodes in one block: busy nodes and other blocks do not count."""
    cases = [
        (fleet([8, 3, 3], [8, 8]), 2),
        (fleet([8, 8], [8, 8, 8]), 3),
        (fleet([7, 0], [1]), 0),
        ([(4, 4, 0), (8, 8, 0), (8, 2, 1)], 2),
    ]
    for shape, right in cases:
        answer = _answer(impl, LARGEST, shape)
        assert answer == right, f"free {[f for _, f, _ in shape]}: {answer}, not {right}"


@needs(LARGEST)
@given(clusters())
def test_the_largest_free_block_on_random_clusters(shape: list[Shape]) -> None:
    """The largest free block, on random clusters: the most idle nodes in any one block."""
    answer = _answer(impl, LARGEST, shape)
    assert answer == right_largest(shape), f"{shape} (gpus, free, block)"


# The replayed stream: a fleet of 6 blocks of 8 nodes of 8 GPUs; one job arrives per tick and
# runs for 10 to 66 ticks; a job nothing can take now is turned away.
BLOCKS, NODES_PER_BLOCK = 6, 8
JOBS, SEED = 300, 7
# (GPUs on one node, or nodes of a gang) and how often: small jobs mostly, gangs most GPU-hours.
MIX = (
    ("gpus", 1, 35),
    ("gpus", 2, 15),
    ("gpus", 4, 15),
    ("gpus", 8, 10),
    ("nodes", 2, 12),
    ("nodes", 4, 9),
    ("nodes", 8, 4),
)


@dataclass(frozen=True)
class Job:
    """One job of the stream: GPUs on one node (``nodes`` 0) or a gang of ``nodes`` whole nodes."""

    gpus: int
    nodes: int
    ticks: int


def stream(seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for _ in range(JOBS):
        kind, size, _ = rng.choices(MIX, weights=[w for _, _, w in MIX])[0]
        ticks = rng.randint(10, 66)
        jobs.append(Job(size, 0, ticks) if kind == "gpus" else Job(0, size, ticks))
    return jobs


@dataclass
class Replay:
    """What one policy made of the stream: the largest free block after each arrival, and the
    jobs turned away."""

    largest: list[int]
    turned_away: int


def replay(policy: str, jobs: list[Job]) -> Replay:
    """The stream with single-node jobs placed by ``policy`` and gangs by ``place_gang``; every
    choice checked before it is applied."""
    shape: list[Shape] = fleet(*([GPUS_PER_NODE] * NODES_PER_BLOCK for _ in range(BLOCKS)))
    running: list[tuple[int, list[tuple[int, int]]]] = []  # (ends at tick, [(node, GPUs held)])
    out = Replay([], 0)
    for tick, job in enumerate(jobs):
        for _, held in (run for run in running if run[0] <= tick):
            for i, gpus in held:
                shape[i] = (shape[i][0], shape[i][1] + gpus, shape[i][2])
        running = [run for run in running if run[0] > tick]
        if job.nodes:
            chosen = _answer(impl, GANG, shape, job.nodes)
            problem = gang_problem(shape, job.nodes, chosen)
            assert problem is None, f"job {tick}, a gang of {job.nodes}: {problem}"
            taken = [] if chosen is None else [(i, shape[i][0]) for i in chosen]
        else:
            node = _answer(impl, policy, shape, job.gpus)
            assert node is None or shape[node][1] >= job.gpus, (
                f"job {tick}: {job.gpus} GPUs on node {node}, {shape[node][1]} free"
            )
            taken = [] if node is None else [(node, job.gpus)]
        if taken:
            for i, gpus in taken:
                shape[i] = (shape[i][0], shape[i][1] - gpus, shape[i][2])
            running.append((tick + job.ticks, taken))
        else:
            out.turned_away += 1
        out.largest.append(right_largest(shape))
    return out


@needs(BEST, WORST, GANG)
def test_best_fit_keeps_a_larger_free_block_than_worst_fit() -> None:
    """On a replayed stream of 300 jobs, best fit keeps a larger largest free block than worst fit.

    6 blocks of 8 nodes; small jobs placed by the policy, gangs of 2 to 8 nodes by place_gang.
    Worst fit puts each small job on the emptiest node, so idle nodes, and with them the blocks
    a gang needs, are used up first."""
    jobs = stream(SEED)
    best, worst = replay(BEST, jobs), replay(WORST, jobs)
    mean_best, mean_worst = statistics.fmean(best.largest), statistics.fmean(worst.largest)
    assert mean_best >= mean_worst + 1.0, (
        f"mean largest free block: best fit {mean_best:.2f}, worst fit {mean_worst:.2f} nodes of {NODES_PER_BLOCK}"
    )
    assert best.turned_away < worst.turned_away, (
        f"jobs turned away: best fit {best.turned_away}, worst fit {worst.turned_away}"
    )

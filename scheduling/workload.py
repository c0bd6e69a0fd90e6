"""The expected workload: the task shapes that arrive and how often, which fragmentation is
measured against (a GPU is a fragment only for the tasks it cannot serve)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from scheduling.errors import InvalidRequest
from scheduling.requests import MILLI, CpuOnly, Gpus, MigSlice, Request, Share, WholeNodes


class TaskShape(NamedTuple):
    """A task's size: CPU, thousandths of each GPU it uses (1000: whole GPUs), how many GPUs, the
    GPU models it accepts (empty: any) and its memory."""

    cpu_milli: int
    gpu_milli: int
    gpus: int
    models: tuple[str, ...] = ()
    memory_mib: int = 0


def shape_of(request: Request) -> TaskShape | None:
    """The shape of a GPU request; None for the kinds fragmentation does not weigh (CPU only,
    whole nodes and MIG slices, which take slots no soft share or whole GPU competes for)."""
    if isinstance(request, Gpus):
        return TaskShape(request.cpu_milli, MILLI, request.count, request.models, request.memory_mib)
    if isinstance(request, Share):
        return TaskShape(request.cpu_milli, request.milli, 1, request.models, request.memory_mib)
    if isinstance(request, CpuOnly | WholeNodes | MigSlice):
        return None
    raise InvalidRequest(f"no shape for {request!r}")


@dataclass(frozen=True)
class WorkloadMix:
    """Task shapes and their probabilities (summing to 1)."""

    shapes: tuple[TaskShape, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.shapes or len(self.shapes) != len(self.weights):
            raise InvalidRequest("a workload mix needs one weight per shape, and at least one shape")
        if any(w < 0 for w in self.weights) or abs(sum(self.weights) - 1.0) > 1e-6:
            raise InvalidRequest("a workload mix's weights are probabilities summing to 1")


def workload_mix(shapes: Iterable[TaskShape]) -> WorkloadMix:
    """The mix of ``shapes`` as they occur, the most frequent first (ties in shape order)."""
    counts = Counter(shapes)
    if not counts:
        raise InvalidRequest("a workload mix needs at least one shape")
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return WorkloadMix(tuple(s for s, _ in ranked), tuple(c / total for _, c in ranked))


# The FGD paper's typical tasks: the most frequent shapes, ten at a time, until they cover 60%.
TYPICAL_COVERAGE = 0.6
TYPICAL_STEP = 10


@lru_cache(maxsize=32)
def typical(mix: WorkloadMix, coverage: float = TYPICAL_COVERAGE, step: int = TYPICAL_STEP) -> WorkloadMix:
    """The most likely shapes of ``mix``, taken ``step`` at a time until they cover ``coverage``
    of it, renormalised: the shapes that decide most placements, without a term for each rare
    one."""
    order = sorted(range(len(mix.shapes)), key=lambda i: (-mix.weights[i], mix.shapes[i]))
    kept, covered = 0, 0.0
    while kept < len(order) and covered < coverage - 1e-9:
        covered += sum(mix.weights[i] for i in order[kept : kept + step])
        kept += step
    chosen = order[:kept]
    mass = sum(mix.weights[i] for i in chosen)
    return WorkloadMix(tuple(mix.shapes[i] for i in chosen), tuple(mix.weights[i] / mass for i in chosen))


@lru_cache(maxsize=32)
def blend(first: WorkloadMix, second: WorkloadMix, share: float) -> WorkloadMix:
    """One mix that weighs ``first`` by ``share`` and ``second`` by the rest: a shape in both
    weighs in both. A fragmentation cost is linear in the weights, so the blend's cost is the
    same blend of the two mixes' costs."""
    weights: dict[TaskShape, float] = {}
    for mix, part in ((first, share), (second, 1.0 - share)):
        for shape, weight in zip(mix.shapes, mix.weights, strict=True):
            weights[shape] = weights.get(shape, 0.0) + part * weight
    return WorkloadMix(tuple(weights), tuple(weights.values()))


# The mix assumed when a cluster is given none: whole GPUs in every count and half a GPU, alike.
DEFAULT_MIX = workload_mix([TaskShape(0, MILLI, n) for n in (1, 2, 4, 8)] + [TaskShape(0, MILLI // 2, 1)])

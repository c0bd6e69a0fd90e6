"""Fleet-median outliers: GPUs whose figure sits far below their peers'.

A GPU is compared only with its peers: GPUs of the same model doing comparable work (busy, with
utilization averaging at least ``BUSY_UTIL_PCT`` over the window, or not), since an idle GPU's
clocks and power sit far below a busy one's by design. Within a group the centre is the median
and the spread the median absolute deviation, scaled by 1.4826 so that it estimates the
standard deviation of normally distributed figures; both ignore a few bad GPUs, where a mean and
standard deviation would be dragged toward them. A GPU is an outlier when its figure is more
than ``k`` spreads below the median. The spread is at least ``MIN_RELATIVE_SPREAD`` of the
median: a group whose figures are all but identical (simulated GPUs, clocks pinned at their
maximum) would otherwise flag a GPU a hair below the rest. Groups of fewer than ``MIN_GROUP``
GPUs are not judged: a median of three says little. Pure: no I/O.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

# The field that says whether a GPU was busy, and from what average utilization it counts as busy.
BUSY_FIELD = "util_pct"
BUSY_UTIL_PCT = 50.0
MAD_TO_SIGMA = 1.4826
MIN_RELATIVE_SPREAD = 0.01
MIN_GROUP = 8


@dataclass(frozen=True, slots=True)
class GpuFigure:
    """One GPU's figure over a window (its average), and whether it was busy."""

    node_id: str
    gpu_index: int
    gpu_model: str
    value: float
    busy: bool


@dataclass(frozen=True, slots=True)
class PeerGroup:
    """GPUs compared with one another: their model, load class, count, median and spread."""

    gpu_model: str
    busy: bool
    gpus: int
    median: float
    spread: float


@dataclass(frozen=True, slots=True)
class Outlier:
    """A GPU more than ``k`` spreads below its group's median; ``deviations`` says how many."""

    figure: GpuFigure
    group: PeerGroup
    deviations: float


def below_median(figures: Iterable[GpuFigure], k: float) -> tuple[list[PeerGroup], list[Outlier]]:
    """The peer groups judged and the outliers among them, most deviant first."""
    if k <= 0:
        raise ValueError(f"k must be > 0, got {k}")
    by_group: dict[tuple[str, bool], list[GpuFigure]] = {}
    for figure in figures:
        by_group.setdefault((figure.gpu_model, figure.busy), []).append(figure)
    groups: list[PeerGroup] = []
    outliers: list[Outlier] = []
    for (model, busy), members in sorted(by_group.items()):
        if len(members) < MIN_GROUP:
            continue
        values = [m.value for m in members]
        median = statistics.median(values)
        mad = statistics.median(abs(v - median) for v in values)
        spread = max(MAD_TO_SIGMA * mad, MIN_RELATIVE_SPREAD * abs(median))
        group = PeerGroup(model, busy, len(members), median, spread)
        groups.append(group)
        if spread == 0:
            continue  # every figure zero: nothing sits below
        for member in members:
            deviations = (median - member.value) / spread
            if deviations > k:
                outliers.append(Outlier(member, group, deviations))
    outliers.sort(key=lambda o: (-o.deviations, o.figure.node_id, o.figure.gpu_index))
    return groups, outliers

"""Judging a node's burn-in against the fleet: pure arithmetic, no I/O.

A node fails when any figure sits further under the median of its model's fleet than the
tolerance allows. The median, not the mean, so that a few broken nodes do not drag the bar
down for the rest; and relative to the fleet, not a data sheet, so that a driver or firmware
that moves every node alike does not fail them all.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class BurnInFigures:
    """What a burn-in measures of a node (the slowest GPU's for per-GPU figures)."""

    gemm_tflops: float
    memory_bandwidth_gbps: float
    nccl_busbw_gbps: float


FIGURES = tuple(f.name for f in fields(BurnInFigures))


@dataclass(frozen=True, slots=True)
class Verdict:
    """A judgement with the evidence it rests on, as the node's event records it."""

    passed: bool
    evidence: str


def fleet_median(results: Sequence[BurnInFigures]) -> BurnInFigures:
    """Each figure's median over ``results``; ValueError when there are none."""
    if not results:
        raise ValueError("no burn-in results to take a median of")
    return BurnInFigures(*(statistics.median(getattr(r, name) for r in results) for name in FIGURES))


def judge(figures: BurnInFigures, median: BurnInFigures, *, tolerance: float, sample: int, model: str) -> Verdict:
    """Pass unless some figure is more than ``tolerance`` under ``median`` (taken over
    ``sample`` nodes of ``model``); the evidence names every figure that fell short."""
    short = []
    for name in FIGURES:
        value, typical = getattr(figures, name), getattr(median, name)
        under = 1 - value / typical if typical > 0 else 0.0
        if under > tolerance:
            short.append(f"{name} {value:.1f} is {under:.1%} under {typical:.1f}")
    bar = f"fleet median of {sample} {model} nodes, tolerance {tolerance:.0%}"
    if short:
        return Verdict(False, f"burn-in failed: {'; '.join(short)} ({bar})")
    measured = ", ".join(f"{name} {getattr(figures, name):.1f}" for name in FIGURES)
    return Verdict(True, f"burn-in passed: {measured} ({bar})")

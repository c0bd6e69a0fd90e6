"""The work a node agent performs when the control plane asks (burn-in, scrub), behind
``NodeWork``: ``SimulatedWork`` makes figures up from a seed, ``UnsupportedWork`` refuses on a
real node, where this package has no GEMM or NCCL runner."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Protocol


class WorkError(Exception):
    """The agent could not perform an action; the message is what its result reports."""


class WorkUnsupported(WorkError):
    """This node's agent has no way to perform the action."""


@dataclass(frozen=True, slots=True)
class BurnIn:
    """A node's burn-in figures: the slowest GPU's dense BF16 GEMM throughput (TFLOP/s) and
    memory bandwidth (GB/s), and the NCCL all-reduce bus bandwidth across its GPUs (GB/s)."""

    gemm_tflops: float
    memory_bandwidth_gbps: float
    nccl_busbw_gbps: float


@dataclass(frozen=True, slots=True)
class Scrub:
    """What a scrub confirmed: every GPU reset, the local disks wiped, the tenant's keys removed."""

    gpus_reset: bool
    disks_wiped: bool
    keys_removed: bool


class NodeWork(Protocol):
    """The actions an agent performs on its node. Each raises ``WorkError`` when it cannot finish."""

    async def burn_in(self) -> BurnIn:
        """Measure the node's GEMM throughput, memory bandwidth and NCCL bus bandwidth."""
        ...

    async def scrub(self) -> Scrub:
        """Reset the GPUs, wipe the disks and remove the tenant's keys."""
        ...


# What a healthy 8-GPU node of each model measures: achieved figures (about 70-90 % of the data
# sheet's peaks), not the peaks themselves. L40S nodes have no NVLink, so NCCL runs over PCIe.
REFERENCE_FIGURES: dict[str, BurnIn] = {
    "A100": BurnIn(gemm_tflops=280.0, memory_bandwidth_gbps=1_750.0, nccl_busbw_gbps=230.0),
    "H100": BurnIn(gemm_tflops=740.0, memory_bandwidth_gbps=3_000.0, nccl_busbw_gbps=480.0),
    "H200": BurnIn(gemm_tflops=750.0, memory_bandwidth_gbps=4_300.0, nccl_busbw_gbps=480.0),
    "B200": BurnIn(gemm_tflops=1_600.0, memory_bandwidth_gbps=6_800.0, nccl_busbw_gbps=780.0),
    "L40S": BurnIn(gemm_tflops=250.0, memory_bandwidth_gbps=760.0, nccl_busbw_gbps=22.0),
}
# Run-to-run spread of each figure, as a share: real burn-ins of identical nodes differ by 1-2 %.
NOISE = 0.015
DEFAULT_BURN_IN_SECONDS = 0.5
DEFAULT_SCRUB_SECONDS = 0.2


class SimulatedWork:
    """Burn-in figures of a healthy ``model`` node with a little noise, drawn from a random
    generator seeded by node id and ``seed``; each action takes its given seconds."""

    def __init__(
        self,
        node_id: str,
        model: str = "H100",
        seed: int = 0,
        *,
        burn_in_seconds: float = DEFAULT_BURN_IN_SECONDS,
        scrub_seconds: float = DEFAULT_SCRUB_SECONDS,
    ) -> None:
        if model not in REFERENCE_FIGURES:
            raise ValueError(f"no simulated work for GPU model {model!r}: known are {sorted(REFERENCE_FIGURES)}")
        for name, seconds in (("burn_in_seconds", burn_in_seconds), ("scrub_seconds", scrub_seconds)):
            if not 0.0 <= seconds < float("inf"):
                raise ValueError(f"{name} must be a finite number of seconds, 0 or more, not {seconds}")
        self._reference = REFERENCE_FIGURES[model]
        # A str seed is hashed the same way in every process (unlike hash()).
        self._random = random.Random(f"work/{node_id}/{seed}")
        self._burn_in_seconds = burn_in_seconds
        self._scrub_seconds = scrub_seconds
        self._factor = 1.0

    @property
    def factor(self) -> float:
        """The share of healthy figures the node measures now (1.0 unless slowed)."""
        return self._factor

    def slow(self, factor: float) -> None:
        """Measure ``factor`` (0-1, exclusive of 0) of the healthy figures from now on: 0.8 is
        20 % under; 1.0 is healthy again."""
        if not 0.0 < factor <= 1.0:
            raise ValueError(f"a slowdown factor is within (0, 1], not {factor}")
        self._factor = factor

    async def burn_in(self) -> BurnIn:
        """The figures after the burn-in's seconds."""
        await asyncio.sleep(self._burn_in_seconds)
        reference = self._reference
        return BurnIn(
            gemm_tflops=self._measure(reference.gemm_tflops),
            memory_bandwidth_gbps=self._measure(reference.memory_bandwidth_gbps),
            nccl_busbw_gbps=self._measure(reference.nccl_busbw_gbps),
        )

    def _measure(self, healthy: float) -> float:
        return round(healthy * self._factor * self._random.uniform(1.0 - NOISE, 1.0 + NOISE), 2)

    async def scrub(self) -> Scrub:
        """All three confirmed, after the scrub's seconds."""
        await asyncio.sleep(self._scrub_seconds)
        return Scrub(gpus_reset=True, disks_wiped=True, keys_removed=True)


class UnsupportedWork:
    """A real node's work with nothing to do it: every action raises ``WorkUnsupported``, which the
    agent reports as the action's error."""

    async def burn_in(self) -> BurnIn:
        """Raises: a burn-in needs a GEMM and NCCL runner."""
        raise WorkUnsupported("burn-in needs a GEMM and NCCL all-reduce runner, which this agent does not have")

    async def scrub(self) -> Scrub:
        """Raises: a scrub needs the site's GPU reset, disk wipe and key removal tools."""
        raise WorkUnsupported(
            "scrub needs the site's GPU reset, disk wipe and key removal tools, which this agent does not run"
        )

"""SimulatedWork: healthy figures near each model's reference, the same for the same seed, a slow
node measurably under; UnsupportedWork refuses with a reason an operator can act on."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from clients.agent.work import (
    NOISE,
    REFERENCE_FIGURES,
    BurnIn,
    NodeWork,
    Scrub,
    SimulatedWork,
    UnsupportedWork,
    WorkError,
    WorkUnsupported,
)


def quick(node_id: str = "sim-0000", model: str = "H100", seed: int = 0) -> SimulatedWork:
    return SimulatedWork(node_id, model, seed, burn_in_seconds=0, scrub_seconds=0)


def ratios(figures: BurnIn, reference: BurnIn) -> list[float]:
    return [getattr(figures, field.name) / getattr(reference, field.name) for field in dataclasses.fields(BurnIn)]


@pytest.mark.parametrize("model", sorted(REFERENCE_FIGURES))
async def test_healthy_figures_are_within_the_noise_of_the_model(model: str) -> None:
    for node in range(20):
        figures = await quick(f"sim-{node:04d}", model).burn_in()
        for ratio in ratios(figures, REFERENCE_FIGURES[model]):
            assert 1 - NOISE - 0.001 <= ratio <= 1 + NOISE + 0.001


async def test_figures_differ_between_nodes_but_not_between_runs_of_one_seed() -> None:
    async def runs(work: SimulatedWork) -> list[BurnIn]:
        return [await work.burn_in() for _ in range(3)]

    first = await runs(quick("sim-0001"))
    assert first == await runs(quick("sim-0001"))
    assert first != await runs(quick("sim-0002"))
    assert first != await runs(quick("sim-0001", seed=1))
    assert len(set(first)) == 3  # each run has its own noise


async def test_the_model_sets_the_scale() -> None:
    b200, a100 = await quick(model="B200").burn_in(), await quick(model="A100").burn_in()
    assert b200.gemm_tflops > 4 * a100.gemm_tflops
    l40s = await quick(model="L40S").burn_in()
    assert l40s.nccl_busbw_gbps < 0.1 * a100.nccl_busbw_gbps  # PCIe, no NVLink


async def test_slow_scales_every_figure_down_and_back() -> None:
    work = quick()
    work.slow(0.8)
    assert work.factor == 0.8
    for ratio in ratios(await work.burn_in(), REFERENCE_FIGURES["H100"]):
        assert 0.8 * (1 - NOISE) - 0.001 <= ratio <= 0.8 * (1 + NOISE) + 0.001
    work.slow(1.0)
    for ratio in ratios(await work.burn_in(), REFERENCE_FIGURES["H100"]):
        assert ratio >= 1 - NOISE - 0.001


@pytest.mark.parametrize("factor", [0.0, -0.5, 1.2])
def test_a_slowdown_outside_0_to_1_is_refused(factor: float) -> None:
    with pytest.raises(ValueError, match="within \\(0, 1\\]"):
        quick().slow(factor)


async def test_scrub_confirms_all_three() -> None:
    assert await quick().scrub() == Scrub(gpus_reset=True, disks_wiped=True, keys_removed=True)


async def test_each_action_takes_its_configured_time() -> None:
    work = SimulatedWork("sim-0000", burn_in_seconds=0.2, scrub_seconds=0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await work.burn_in()
    assert loop.time() - started >= 0.2
    started = loop.time()
    await work.scrub()
    assert loop.time() - started < 0.2


def test_an_unknown_model_or_a_negative_duration_is_refused() -> None:
    with pytest.raises(ValueError, match="no simulated work for GPU model 'X9'"):
        SimulatedWork("sim-0000", "X9")
    with pytest.raises(ValueError, match="scrub_seconds"):
        SimulatedWork("sim-0000", scrub_seconds=-1)


async def test_unsupported_work_says_what_is_missing() -> None:
    work: NodeWork = UnsupportedWork()
    with pytest.raises(WorkUnsupported, match="GEMM and NCCL") as burn_in:
        await work.burn_in()
    assert isinstance(burn_in.value, WorkError)
    with pytest.raises(WorkUnsupported, match="GPU reset, disk wipe and key removal"):
        await work.scrub()
    simulated: NodeWork = quick()  # both are NodeWork
    assert isinstance(await simulated.burn_in(), BurnIn)

"""SimulatedGpus: the same seed gives the same node, and each injected fault shows in what the
backend reports until it is cleared."""

from __future__ import annotations

import pytest

from clients.agent import GpuBackend, ThrottleReason, XidEvent
from clients.agent.backend import UnknownGpu
from clients.agent.simulated import SimulatedGpus

AT_MS = 1_767_225_600_000


def node(seed: int = 7, node_id: str = "node-000") -> SimulatedGpus:
    return SimulatedGpus(node_id, seed=seed, clock=lambda: AT_MS)


def test_it_is_a_gpu_backend() -> None:
    backend: GpuBackend = node()
    assert len(backend.inventory()) == 8
    backend.close()


def test_the_same_seed_gives_the_same_gpus_and_readings() -> None:
    first, second = node(), node()
    assert first.inventory() == second.inventory()
    assert [first.sample() for _ in range(3)] == [second.sample() for _ in range(3)]


def test_another_seed_or_node_gives_other_gpus() -> None:
    uuids = {gpu.uuid for gpu in node().inventory()}
    assert len(uuids) == 8
    assert uuids.isdisjoint(gpu.uuid for gpu in node(seed=8).inventory())
    assert uuids.isdisjoint(gpu.uuid for gpu in node(node_id="node-001").inventory())


def test_idle_and_busy_readings_are_plausible() -> None:
    gpus = node()
    gpus.set_load(3, 1.0)
    samples = gpus.sample()
    idle, busy = samples[0], samples[3]
    assert idle.throttle_reasons == frozenset({ThrottleReason.GPU_IDLE})
    assert busy.throttle_reasons == frozenset()
    assert idle.power_w is not None
    assert busy.power_w is not None
    assert 50 < idle.power_w < 100 < 600 < busy.power_w <= 700
    assert idle.temp_c is not None
    assert busy.temp_c is not None
    assert idle.temp_c < busy.temp_c < 85
    assert (idle.util_pct, busy.util_pct) == (0.0, 100.0)
    assert gpus.inventory()[0].name == "NVIDIA H100 80GB HBM3"


def test_an_injected_xid_is_reported_once() -> None:
    gpus = node()
    gpus.inject_xid(2, 48)
    assert gpus.xid_events() == (XidEvent(index=2, code=48, timestamp_ms=AT_MS),)
    assert gpus.xid_events() == ()


def test_rising_ecc_rises_every_sample_and_stops_when_cleared() -> None:
    gpus = node()
    gpus.rising_ecc(1, per_sample=5)
    counts = [gpus.sample()[1].ecc_corrected_total for _ in range(3)]
    assert counts == [5, 10, 15]
    assert gpus.sample()[0].ecc_corrected_total == 0
    gpus.clear(1)
    assert [gpus.sample()[1].ecc_corrected_total for _ in range(2)] == [20, 20]


def test_a_throttle_shows_its_reason_and_lowers_clocks() -> None:
    gpus = node()
    gpus.set_load(4, 1.0)
    full = gpus.sample()[4].sm_clock_mhz
    gpus.throttle(4, ThrottleReason.HW_THERMAL_SLOWDOWN)
    throttled = gpus.sample()[4]
    assert throttled.throttle_reasons == frozenset({ThrottleReason.HW_THERMAL_SLOWDOWN})
    assert full is not None
    assert throttled.sm_clock_mhz is not None
    assert throttled.sm_clock_mhz < full
    gpus.clear(4)
    assert gpus.sample()[4].sm_clock_mhz == full


def test_off_bus_raises_xid_79_and_the_gpu_disappears_until_cleared() -> None:
    gpus = node()
    gpus.off_bus(5)
    gpus.off_bus(5)  # already gone: no second event
    assert gpus.xid_events() == (XidEvent(index=5, code=79, timestamp_ms=AT_MS),)
    assert 5 not in [gpu.index for gpu in gpus.inventory()]
    assert [sample.index for sample in gpus.sample()] == [0, 1, 2, 3, 4, 6, 7]
    gpus.clear(5)
    assert [gpu.index for gpu in gpus.inventory()] == list(range(8))
    assert len(gpus.sample()) == 8


def test_slow_lowers_clocks_and_throughput() -> None:
    gpus = node()
    gpus.set_load(6, 1.0)
    before = gpus.sample()[6]
    gpus.slow(6, 0.5)
    after = gpus.sample()[6]
    assert before.sm_clock_mhz is not None
    assert after.sm_clock_mhz is not None
    assert after.sm_clock_mhz == pytest.approx(before.sm_clock_mhz * 0.5, abs=1)
    assert after.util_pct == 50.0
    gpus.clear(6)
    assert gpus.sample()[6].util_pct == 100.0


def test_faults_refuse_what_cannot_be() -> None:
    gpus = node()
    with pytest.raises(UnknownGpu, match="no GPU 8: the node has GPUs 0-7"):
        gpus.inject_xid(8, 13)
    with pytest.raises(ValueError, match="slowdown factor"):
        gpus.slow(0, 0.0)
    with pytest.raises(ValueError, match="only rises"):
        gpus.rising_ecc(0, -1)
    with pytest.raises(ValueError, match="no simulated GPU model 'Z9'"):
        SimulatedGpus("node-000", model="Z9")

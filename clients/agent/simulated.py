"""``SimulatedGpus``: a node's GPUs made up deterministically from a seed, with faults that can be
injected, for running agents and tests without hardware."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from clients.agent.backend import UnknownGpu, now_ms
from clients.agent.inventory import GpuInfo, GpuSample, RemappedRows, ThrottleReason, XidEvent

# The XID a GPU raises when it stops answering on PCIe ("GPU has fallen off the bus").
XID_FALLEN_OFF_BUS = 79


@dataclass(frozen=True, slots=True)
class GpuModel:
    """What a simulated GPU of one model reports at idle and at full load."""

    name: str
    memory_bytes: int
    vbios_version: str
    inforom_version: str
    idle_power_w: float
    busy_power_w: float
    idle_temp_c: float
    busy_temp_c: float
    idle_sm_clock_mhz: float
    max_sm_clock_mhz: float
    mem_clock_mhz: float


MODELS: dict[str, GpuModel] = {
    "H100": GpuModel(
        name="NVIDIA H100 80GB HBM3",
        memory_bytes=81_559 * 2**20,
        vbios_version="96.00.99.00.01",
        inforom_version="G520.0200.00.05",
        idle_power_w=70.0,
        busy_power_w=650.0,
        idle_temp_c=31.0,
        busy_temp_c=68.0,
        idle_sm_clock_mhz=345.0,
        max_sm_clock_mhz=1980.0,
        mem_clock_mhz=2619.0,
    ),
}
DRIVER_VERSION = "550.90.07"
# Clocks under a throttle reason other than idle, as a share of what they would be.
THROTTLED_CLOCK_SHARE = 0.6


@dataclass(slots=True)
class _Faults:
    """What is currently wrong with one simulated GPU."""

    ecc_per_sample: int = 0
    throttles: set[ThrottleReason] = field(default_factory=set)
    off_bus: bool = False
    slow_factor: float = 1.0


@dataclass(slots=True)
class _Gpu:
    info: GpuInfo
    load: float = 0.0  # 0-1: the share of the GPU a workload uses
    ecc_corrected: int = 0
    faults: _Faults = field(default_factory=_Faults)


class SimulatedGpus:
    """``gpus`` GPUs of ``model`` on node ``node_id``; the same node, seed and calls give the same
    inventory, samples and events."""

    def __init__(
        self,
        node_id: str,
        gpus: int = 8,
        model: str = "H100",
        seed: int = 0,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        if model not in MODELS:
            raise ValueError(f"no simulated GPU model {model!r}: known are {sorted(MODELS)}")
        self._model = MODELS[model]
        self._clock = clock
        # A str seed is hashed the same way in every process (unlike hash()).
        self._random = random.Random(f"{node_id}/{seed}")
        self._gpus = [_Gpu(self._make_info(index)) for index in range(gpus)]
        self._events: list[XidEvent] = []

    def _make_info(self, index: int) -> GpuInfo:
        return GpuInfo(
            index=index,
            uuid=f"GPU-{uuid.UUID(int=self._random.getrandbits(128), version=4)}",
            name=self._model.name,
            serial=str(self._random.randrange(10**12, 10**13)),
            memory_bytes=self._model.memory_bytes,
            driver_version=DRIVER_VERSION,
            vbios_version=self._model.vbios_version,
            inforom_version=self._model.inforom_version,
        )

    def _gpu(self, index: int) -> _Gpu:
        if not 0 <= index < len(self._gpus):
            raise UnknownGpu(index, len(self._gpus))
        return self._gpus[index]

    def inventory(self) -> tuple[GpuInfo, ...]:
        """Every GPU not off the bus."""
        return tuple(gpu.info for gpu in self._gpus if not gpu.faults.off_bus)

    def sample(self) -> tuple[GpuSample, ...]:
        """One reading of every GPU not off the bus, with a little noise from the seed."""
        at = self._clock()
        return tuple(self._sample(gpu, at) for gpu in self._gpus if not gpu.faults.off_bus)

    def _sample(self, gpu: _Gpu, at: int) -> GpuSample:
        model, faults, noise = self._model, gpu.faults, self._random.uniform
        gpu.ecc_corrected += faults.ecc_per_sample
        load = gpu.load * faults.slow_factor
        clock_share = faults.slow_factor * (THROTTLED_CLOCK_SHARE if _slowed_by(faults.throttles) else 1.0)
        sm_clock = model.max_sm_clock_mhz if gpu.load > 0 else model.idle_sm_clock_mhz
        reasons = set(faults.throttles) | ({ThrottleReason.GPU_IDLE} if gpu.load == 0 else set())
        return GpuSample(
            index=gpu.info.index,
            timestamp_ms=at,
            temp_c=round(_between(model.idle_temp_c, model.busy_temp_c, load) + noise(-0.5, 0.5), 1),
            sm_clock_mhz=float(round(sm_clock * clock_share)),
            mem_clock_mhz=model.mem_clock_mhz,
            power_w=round(_between(model.idle_power_w, model.busy_power_w, load) + noise(-2.0, 2.0), 1),
            util_pct=round(100.0 * load, 1),
            memory_used_bytes=int(model.memory_bytes * 0.9 * gpu.load) + 512 * 2**20,
            ecc_corrected_total=gpu.ecc_corrected,
            ecc_uncorrected_total=0,
            remapped_rows=RemappedRows(correctable=0, uncorrectable=0, pending=False, failure=False),
            throttle_reasons=frozenset(reasons),
        )

    def xid_events(self) -> tuple[XidEvent, ...]:
        """The XID events raised since the previous call."""
        events, self._events = tuple(self._events), []
        return events

    def close(self) -> None:
        """Nothing to release."""

    def set_load(self, index: int, load: float) -> None:
        """Runs a workload using ``load`` (0-1) of GPU ``index``; 0 is idle."""
        if not 0.0 <= load <= 1.0:
            raise ValueError(f"load must be within 0-1, not {load}")
        self._gpu(index).load = load

    def inject_xid(self, index: int, code: int) -> XidEvent:
        """GPU ``index`` reports XID ``code`` once; the event, timed now."""
        self._gpu(index)
        event = XidEvent(index=index, code=code, timestamp_ms=self._clock())
        self._events.append(event)
        return event

    def rising_ecc(self, index: int, per_sample: int) -> None:
        """GPU ``index``'s corrected ECC count rises by ``per_sample`` at every sample."""
        if per_sample < 0:
            raise ValueError(f"an error count only rises: per_sample {per_sample}")
        self._gpu(index).faults.ecc_per_sample = per_sample

    def throttle(self, index: int, reason: ThrottleReason) -> None:
        """GPU ``index`` reports ``reason``; any reason but idle also lowers its clocks."""
        self._gpu(index).faults.throttles.add(reason)

    def off_bus(self, index: int) -> None:
        """GPU ``index`` falls off the bus: it raises XID 79 and is gone from inventory and samples."""
        gpu = self._gpu(index)
        if not gpu.faults.off_bus:
            gpu.faults.off_bus = True
            self.inject_xid(index, XID_FALLEN_OFF_BUS)

    def slow(self, index: int, factor: float) -> None:
        """GPU ``index`` runs at ``factor`` (0-1, exclusive of 0) of its clocks and throughput."""
        if not 0.0 < factor <= 1.0:
            raise ValueError(f"a slowdown factor is within (0, 1], not {factor}")
        self._gpu(index).faults.slow_factor = factor

    def clear(self, index: int) -> None:
        """GPU ``index`` is healthy again (back on the bus, as after a reset); its ECC count keeps
        what it reached, since a counter never goes back, but rises no more."""
        self._gpu(index).faults = _Faults()


def _slowed_by(reasons: set[ThrottleReason]) -> bool:
    return bool(reasons - {ThrottleReason.GPU_IDLE})


def _between(idle: float, busy: float, load: float) -> float:
    return idle + (busy - idle) * load

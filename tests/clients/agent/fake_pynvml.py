"""A stand-in for the ``pynvml`` module at the library boundary: the functions, constants and
error classes NvmlBackend uses, over a few GPUs described in plain dicts."""

# The names are pynvml's own, which the backend looks up on the module.
# ruff: noqa: N801, N815, N816

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
nvmlEventTypeXidCriticalError = 0x8


class NVMLError(Exception):
    """pynvml's base error."""


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_FunctionNotFound(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class NVMLError_Timeout(NVMLError):
    pass


class NVMLError_GpuIsLost(NVMLError):
    pass


def h100(index: int) -> dict[str, Any]:
    """What an H100 answers, per NVML getter."""
    return {
        "uuid": f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
        "name": b"NVIDIA H100 80GB HBM3",  # some nvidia-ml-py versions return bytes
        "serial": "165432100000" + str(index),
        "memory": SimpleNamespace(total=85_520_809_984, used=1_048_576 * (index + 1), free=0),
        "vbios": "96.00.99.00.01",
        "inforom": "G520.0200.00.05",
        "temperature": 41,
        "clocks": {NVML_CLOCK_SM: 1980, NVML_CLOCK_MEM: 2619},
        "power_mw": 412_345,
        "utilization": SimpleNamespace(gpu=87, memory=40),
        "ecc": {
            (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC): 3,
            (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC): 0,
            (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC): 900,
            (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC): 7,
        },
        "remapped_rows": (2, 1, 1, 0),
        "clocks_event_reasons": 0x4 | 0x40,
    }


@dataclass
class FakeNvml:
    """The module: ``gpus[i]`` answers for GPU i; a value that is an exception class is raised."""

    gpus: list[dict[str, Any]] = field(default_factory=lambda: [h100(0), h100(1)])
    init_error: type[NVMLError] | None = None
    pending_events: list[SimpleNamespace] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    initialized: bool = False

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_Timeout = NVMLError_Timeout
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_MEMORY_ERROR_TYPE_CORRECTED = NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_AGGREGATE_ECC = NVML_AGGREGATE_ECC
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError

    def _answer(self, handle: int, key: str) -> Any:
        value = self.gpus[handle][key]
        if isinstance(value, type) and issubclass(value, NVMLError):
            raise value()
        return value

    def raise_xid(self, index: int, code: int) -> None:
        """The driver queues XID ``code`` for GPU ``index``."""
        self.pending_events.append(
            SimpleNamespace(device=index, eventType=nvmlEventTypeXidCriticalError, eventData=code)
        )

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error()
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.90.07"

    def nvmlDeviceGetUUID(self, handle: int) -> Any:
        return self._answer(handle, "uuid")

    def nvmlDeviceGetName(self, handle: int) -> Any:
        return self._answer(handle, "name")

    def nvmlDeviceGetSerial(self, handle: int) -> Any:
        return self._answer(handle, "serial")

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return self._answer(handle, "memory")

    def nvmlDeviceGetVbiosVersion(self, handle: int) -> Any:
        return self._answer(handle, "vbios")

    def nvmlDeviceGetInforomImageVersion(self, handle: int) -> Any:
        return self._answer(handle, "inforom")

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> Any:
        assert sensor == NVML_TEMPERATURE_GPU
        return self._answer(handle, "temperature")

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> Any:
        return self._answer(handle, "clocks")[clock]

    def nvmlDeviceGetPowerUsage(self, handle: int) -> Any:
        return self._answer(handle, "power_mw")

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return self._answer(handle, "utilization")

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter_type: int) -> Any:
        return self._answer(handle, "ecc")[(error_type, counter_type)]

    def nvmlDeviceGetRemappedRows(self, handle: int) -> Any:
        return self._answer(handle, "remapped_rows")

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> Any:
        return self._answer(handle, "clocks_event_reasons")

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: int, event_types: int, event_set: str) -> None:
        assert event_types == nvmlEventTypeXidCriticalError
        assert event_set == "event-set"
        self.calls.append(f"register {handle}")

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Any:
        assert timeout_ms == 0  # xid_events never waits
        if not self.pending_events:
            raise NVMLError_Timeout()
        return self.pending_events.pop(0)

    def nvmlEventSetFree(self, event_set: str) -> None:
        self.calls.append("free")

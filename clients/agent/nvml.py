"""``NvmlBackend``: the GPUs of this machine read through NVML (the ``pynvml`` module of
nvidia-ml-py). The module is a constructor parameter, so the mapping can be exercised without a
GPU."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import structlog

from clients.agent.backend import NoGpuFound, now_ms
from clients.agent.inventory import GpuInfo, GpuSample, RemappedRows, ThrottleReason, XidEvent

log = structlog.get_logger(__name__)

# The bits of nvmlDeviceGetCurrentClocksEventReasons (nvml.h's nvmlClocksEventReason*). Bits
# not listed here are left out of a sample's reasons.
THROTTLE_BITS: tuple[tuple[int, ThrottleReason], ...] = (
    (0x001, ThrottleReason.GPU_IDLE),
    (0x002, ThrottleReason.APPLICATIONS_CLOCKS_SETTING),
    (0x004, ThrottleReason.SW_POWER_CAP),
    (0x008, ThrottleReason.HW_SLOWDOWN),
    (0x010, ThrottleReason.SYNC_BOOST),
    (0x020, ThrottleReason.SW_THERMAL_SLOWDOWN),
    (0x040, ThrottleReason.HW_THERMAL_SLOWDOWN),
    (0x080, ThrottleReason.HW_POWER_BRAKE_SLOWDOWN),
    (0x100, ThrottleReason.DISPLAY_CLOCK_SETTING),
)
# Events drained per xid_events call; the rest wait in NVML's queue for the next call.
MAX_EVENTS_PER_DRAIN = 1024


def throttle_reasons(mask: int) -> frozenset[ThrottleReason]:
    """The named reasons set in an NVML clocks event reasons bitmask."""
    return frozenset(reason for bit, reason in THROTTLE_BITS if mask & bit)


def _text(value: str | bytes) -> str:
    # nvidia-ml-py returns str from some getters and bytes from others, depending on its version.
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _import_pynvml() -> Any:
    try:
        return importlib.import_module("pynvml")
    except ImportError as error:
        raise NoGpuFound("the nvidia-ml-py package (module pynvml) is not installed") from error


class NvmlBackend:
    """The machine's NVIDIA GPUs through NVML; raises ``NoGpuFound`` when there are none."""

    def __init__(self, nvml: Any = None, clock: Callable[[], int] = now_ms) -> None:
        self._nvml: Any = _import_pynvml() if nvml is None else nvml
        self._clock = clock
        self._closed = False
        self._init()
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
            if count == 0:
                raise NoGpuFound("the NVIDIA driver is loaded but reports no GPU (check `nvidia-smi -L`)")
            self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
            self._driver_version = _text(self._nvml.nvmlSystemGetDriverVersion())
            self._events = self._register_xid_events()
        except BaseException:
            self._nvml.nvmlShutdown()
            raise

    def _init(self) -> None:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError_LibraryNotFound as error:
            raise NoGpuFound(
                "the NVML library (libnvidia-ml.so.1) could not be loaded; install the NVIDIA driver, "
                "or run the agent with the simulated backend"
            ) from error
        except nvml.NVMLError_DriverNotLoaded as error:
            raise NoGpuFound(
                "the NVIDIA kernel driver is not loaded (check `nvidia-smi` and `lsmod | grep nvidia`)"
            ) from error

    def _optional(self, getter: Callable[..., Any], *args: Any) -> Any:
        """``getter(*args)``, or None where the GPU or driver does not support it."""
        nvml = self._nvml
        try:
            return getter(*args)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
            return None

    def _register_xid_events(self) -> Any:
        """An event set with every GPU that can report XID errors registered; None if none can."""
        nvml = self._nvml
        events = self._optional(nvml.nvmlEventSetCreate)
        registered = 0
        for index, handle in enumerate(self._handles if events is not None else []):
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
                registered += 1
            except nvml.NVMLError_NotSupported:
                log.warning("nvml_xid_events_unsupported", gpu=index)
        if events is not None and registered == 0:
            nvml.nvmlEventSetFree(events)
            return None
        return events

    def inventory(self) -> tuple[GpuInfo, ...]:
        """Every GPU's identity, model, memory and firmware versions."""
        return tuple(self._info(index, handle) for index, handle in enumerate(self._handles))

    def _info(self, index: int, handle: Any) -> GpuInfo:
        nvml = self._nvml
        serial = self._optional(nvml.nvmlDeviceGetSerial, handle)
        vbios = self._optional(nvml.nvmlDeviceGetVbiosVersion, handle)
        inforom = self._optional(nvml.nvmlDeviceGetInforomImageVersion, handle)
        return GpuInfo(
            index=index,
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            name=_text(nvml.nvmlDeviceGetName(handle)),
            serial=None if serial is None else _text(serial),
            memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
            driver_version=self._driver_version,
            vbios_version=None if vbios is None else _text(vbios),
            inforom_version=None if inforom is None else _text(inforom),
        )

    def sample(self) -> tuple[GpuSample, ...]:
        """One reading of every GPU; a GPU that fell off the bus is left out (its XID 79 says so)."""
        at = self._clock()
        samples = []
        for index, handle in enumerate(self._handles):
            try:
                samples.append(self._sample(index, handle, at))
            except self._nvml.NVMLError_GpuIsLost:
                log.warning("nvml_gpu_lost", gpu=index)
        return tuple(samples)

    def _sample(self, index: int, handle: Any, at: int) -> GpuSample:
        nvml = self._nvml
        optional = self._optional
        power_mw = optional(nvml.nvmlDeviceGetPowerUsage, handle)
        utilization = optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = optional(nvml.nvmlDeviceGetMemoryInfo, handle)
        return GpuSample(
            index=index,
            timestamp_ms=at,
            temp_c=_number(optional(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)),
            sm_clock_mhz=_number(optional(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)),
            mem_clock_mhz=_number(optional(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM)),
            power_w=None if power_mw is None else power_mw / 1000.0,
            util_pct=None if utilization is None else float(utilization.gpu),
            memory_used_bytes=None if memory is None else int(memory.used),
            ecc_corrected_total=self._ecc(handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ecc_uncorrected_total=self._ecc(handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            remapped_rows=self._remapped_rows(handle),
            throttle_reasons=self._throttle_reasons(handle),
        )

    def _ecc(self, handle: Any, error_type: int) -> int | None:
        # Volatile counts (since the driver loaded) rather than aggregate (the GPU's lifetime):
        # they rise with what the GPU does now, while the aggregate keeps every past owner's
        # errors, whose lasting damage the remapped rows already show.
        nvml = self._nvml
        count = self._optional(nvml.nvmlDeviceGetTotalEccErrors, handle, error_type, nvml.NVML_VOLATILE_ECC)
        return None if count is None else int(count)

    def _remapped_rows(self, handle: Any) -> RemappedRows | None:
        rows = self._optional(self._nvml.nvmlDeviceGetRemappedRows, handle)
        if rows is None:
            return None
        correctable, uncorrectable, pending, failure = rows
        return RemappedRows(int(correctable), int(uncorrectable), bool(pending), bool(failure))

    def _throttle_reasons(self, handle: Any) -> frozenset[ThrottleReason] | None:
        nvml = self._nvml
        # The older name of the same call, for drivers from before it was renamed.
        getter = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if getter is None:
            getter = nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = self._optional(getter, handle)
        return None if mask is None else throttle_reasons(int(mask))

    def xid_events(self) -> tuple[XidEvent, ...]:
        """The XID errors NVML queued since the previous call; waits for none."""
        if self._events is None:
            return ()
        nvml = self._nvml
        at = self._clock()
        found = []
        for _ in range(MAX_EVENTS_PER_DRAIN):
            try:
                data = nvml.nvmlEventSetWait_v2(self._events, 0)
            except nvml.NVMLError_Timeout:
                break
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                index = int(nvml.nvmlDeviceGetIndex(data.device))
                found.append(XidEvent(index=index, code=int(data.eventData), timestamp_ms=at))
        return tuple(found)

    def close(self) -> None:
        """Frees the event set and shuts NVML down; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._events is not None:
            self._nvml.nvmlEventSetFree(self._events)
        self._nvml.nvmlShutdown()


def _number(value: Any) -> float | None:
    return None if value is None else float(value)

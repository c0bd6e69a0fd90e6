"""NvmlBackend over a stand-in pynvml module: how NVML's answers become inventory, samples and
events, and when there is no GPU to read."""

from __future__ import annotations

import ctypes.util

import pytest

from clients.agent import NoGpuFound, RemappedRows, ThrottleReason, XidEvent
from clients.agent.nvml import NvmlBackend, throttle_reasons
from tests.clients.agent.fake_pynvml import (
    NVML_CLOCK_SM,
    FakeNvml,
    NVMLError,
    NVMLError_DriverNotLoaded,
    NVMLError_FunctionNotFound,
    NVMLError_GpuIsLost,
    NVMLError_LibraryNotFound,
    NVMLError_NotSupported,
)

AT_MS = 1_767_225_600_000


def backend(nvml: FakeNvml) -> NvmlBackend:
    return NvmlBackend(nvml=nvml, clock=lambda: AT_MS)


def test_inventory_maps_each_gpu() -> None:
    gpus = backend(FakeNvml()).inventory()
    assert [gpu.index for gpu in gpus] == [0, 1]
    first = gpus[0]
    assert first.uuid == "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"
    assert first.name == "NVIDIA H100 80GB HBM3"  # decoded from bytes
    assert first.serial == "1654321000000"
    assert first.memory_bytes == 85_520_809_984
    assert first.driver_version == "550.90.07"
    assert first.vbios_version == "96.00.99.00.01"
    assert first.inforom_version == "G520.0200.00.05"


def test_sample_converts_units_and_reads_volatile_ecc() -> None:
    sample = backend(FakeNvml()).sample()[1]
    assert sample.index == 1
    assert sample.timestamp_ms == AT_MS
    assert sample.power_w == pytest.approx(412.345)  # NVML answers milliwatts
    assert sample.temp_c == 41.0
    assert (sample.sm_clock_mhz, sample.mem_clock_mhz) == (1980.0, 2619.0)
    assert sample.util_pct == 87.0
    assert sample.memory_used_bytes == 2 * 1_048_576
    # The volatile counters, not the aggregate ones (900 and 7 in the fake).
    assert (sample.ecc_corrected_total, sample.ecc_uncorrected_total) == (3, 0)
    assert sample.remapped_rows == RemappedRows(correctable=2, uncorrectable=1, pending=True, failure=False)
    assert sample.throttle_reasons == frozenset({ThrottleReason.SW_POWER_CAP, ThrottleReason.HW_THERMAL_SLOWDOWN})


def test_sample_fields_are_the_metrics_names() -> None:
    fields = backend(FakeNvml()).sample()[0].fields()
    assert fields["power_w"] == pytest.approx(412.345)
    assert fields["temp_c"] == 41.0
    assert fields["util_pct"] == 87.0
    assert fields["remapped_rows_pending"] == 1.0
    assert all(isinstance(value, float) for value in fields.values())


@pytest.mark.parametrize(
    ("mask", "reasons"),
    [
        (0x0, set()),
        (0x1, {ThrottleReason.GPU_IDLE}),
        (0x2 | 0x8, {ThrottleReason.APPLICATIONS_CLOCKS_SETTING, ThrottleReason.HW_SLOWDOWN}),
        (0x10 | 0x20, {ThrottleReason.SYNC_BOOST, ThrottleReason.SW_THERMAL_SLOWDOWN}),
        (0x80 | 0x100, {ThrottleReason.HW_POWER_BRAKE_SLOWDOWN, ThrottleReason.DISPLAY_CLOCK_SETTING}),
        (0x1_0000_0000, set()),  # a bit this table does not name
    ],
)
def test_throttle_bits_decode_to_named_reasons(mask: int, reasons: set[ThrottleReason]) -> None:
    assert throttle_reasons(mask) == reasons


def test_every_throttle_reason_has_its_own_bit() -> None:
    assert throttle_reasons(0x1FF) == set(ThrottleReason)


def test_not_supported_reads_as_none() -> None:
    nvml = FakeNvml()
    for key in ("serial", "inforom", "power_mw", "temperature", "ecc", "remapped_rows", "clocks_event_reasons"):
        nvml.gpus[0][key] = NVMLError_NotSupported
    nvml.gpus[0]["vbios"] = NVMLError_FunctionNotFound  # a driver older than the call
    gpus = backend(nvml)
    info, sample = gpus.inventory()[0], gpus.sample()[0]
    assert (info.serial, info.vbios_version, info.inforom_version) == (None, None, None)
    assert sample.power_w is None
    assert sample.temp_c is None
    assert (sample.ecc_corrected_total, sample.ecc_uncorrected_total) == (None, None)
    assert sample.remapped_rows is None
    assert sample.throttle_reasons is None
    assert sample.sm_clock_mhz == 1980.0  # the rest is still read
    assert "power_w" not in sample.fields()
    assert gpus.sample()[1].power_w == pytest.approx(412.345)


def test_other_nvml_errors_are_not_hidden() -> None:
    nvml = FakeNvml()
    nvml.gpus[0]["power_mw"] = NVMLError
    with pytest.raises(NVMLError):
        backend(nvml).sample()


def test_a_lost_gpu_is_left_out_of_the_samples() -> None:
    nvml = FakeNvml()
    nvml.gpus[0]["clocks"] = {NVML_CLOCK_SM: NVMLError_GpuIsLost}
    nvml.gpus[0]["temperature"] = NVMLError_GpuIsLost
    assert [sample.index for sample in backend(nvml).sample()] == [1]


def test_xid_events_are_drained_once() -> None:
    nvml = FakeNvml()
    gpus = backend(nvml)
    assert nvml.calls == ["register 0", "register 1"]
    assert gpus.xid_events() == ()
    nvml.raise_xid(1, 79)
    nvml.raise_xid(0, 48)
    assert gpus.xid_events() == (
        XidEvent(index=1, code=79, timestamp_ms=AT_MS),
        XidEvent(index=0, code=48, timestamp_ms=AT_MS),
    )
    assert gpus.xid_events() == ()


def test_close_frees_the_event_set_and_shuts_down_once() -> None:
    nvml = FakeNvml()
    gpus = backend(nvml)
    gpus.close()
    gpus.close()
    assert nvml.calls[-2:] == ["free", "shutdown"]
    assert nvml.calls.count("shutdown") == 1
    assert not nvml.initialized


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (NVMLError_LibraryNotFound, "libnvidia-ml.so.1 could not be loaded"),
        (NVMLError_DriverNotLoaded, "kernel driver is not loaded"),
    ],
)
def test_no_driver_is_no_gpu_found(error: type[NVMLError], says: str) -> None:
    with pytest.raises(NoGpuFound, match=r"^no NVIDIA driver or GPU found: ") as raised:
        backend(FakeNvml(init_error=error))
    assert says in str(raised.value).replace("(", "").replace(")", "")


def test_zero_devices_is_no_gpu_found_and_shuts_nvml_down() -> None:
    nvml = FakeNvml(gpus=[])
    with pytest.raises(NoGpuFound, match=r"^no NVIDIA driver or GPU found: .*reports no GPU"):
        backend(nvml)
    assert nvml.calls == ["shutdown"]


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None,
    reason="needs a machine without the NVIDIA driver: with libnvidia-ml present, NVML loads and this error "
    "cannot happen (the stand-in module covers the mapping everywhere)",
)
def test_the_real_library_without_a_driver_is_no_gpu_found() -> None:
    with pytest.raises(NoGpuFound, match=r"^no NVIDIA driver or GPU found: the NVML library"):
        NvmlBackend()

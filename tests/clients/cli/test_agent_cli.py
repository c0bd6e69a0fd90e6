"""``gpucloud agent``: ``inject`` checks a fault before queueing it and names the bad option; the
real agent says what is missing, and on a machine without a GPU exits 1 with NoGpuFound's message
instead of a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clients.agent.control import Fault, Injection, parse_line
from tests.clients.agent.fake_pynvml import FakeNvml, NVMLError_DriverNotLoaded
from tests.clients.cli.test_connection import gpucloud

REAL = ["--node-id", "gpu-17", "--token", "gpc_a_b", "--zone", "z", "--rack", "r", "--leaf-switch", "l"]


def test_inject_appends_one_checked_line(tmp_path: Path) -> None:
    control = tmp_path / "inject.jsonl"
    code, output = gpucloud(
        "agent", "inject", "sim-0003", "xid", "--gpu", "2", "--code", "79", "--control", str(control)
    )
    assert code == 0, output
    assert f"queued in {control}" in output
    code, output = gpucloud("agent", "inject", "sim-0004", "slow", "--factor", "0.8", "--control", str(control))
    assert code == 0, output
    assert [parse_line(line) for line in control.read_text().splitlines()] == [
        Injection("sim-0003", Fault.XID, gpu=2, code=79),
        Injection("sim-0004", Fault.SLOW, factor=0.8),
    ]


def test_inject_defaults_to_the_data_directorys_control_file(tmp_path: Path) -> None:
    code, output = gpucloud(
        "agent", "inject", "sim-0001", "lost-heartbeat", "--seconds", "30", "--data-dir", str(tmp_path)
    )
    assert code == 0, output
    lines = (tmp_path / "agents" / "inject.jsonl").read_text().splitlines()
    assert [parse_line(line) for line in lines] == [Injection("sim-0001", Fault.LOST_HEARTBEAT, seconds=30.0)]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["sim-1", "xid", "--gpu", "2"], "--code: is required for xid"),
        (["sim-1", "melt"], "FAULT: no fault 'melt'; known are xid, ecc, throttle"),
        (["sim-1", "off-bus", "--gpu", "9"], "--gpu: must be a whole number within 0-7, not 9"),
        (["sim-1", "off-bus", "--gpu", "1", "--per-sample", "3"], "--per-sample: not a parameter of off-bus"),
        (["sim-1", "slow", "--factor", "1.5"], "--factor: must be within (0, 1]"),
        (["sim-1", "throttle", "--gpu", "1", "--reason", "hot"], "--reason: no throttle reason 'hot'"),
        (["sim 1", "clear"], "NODE: must be a node id without spaces"),
    ],
)
def test_inject_refuses_a_bad_fault_naming_the_option_and_writes_nothing(
    tmp_path: Path, args: list[str], says: str
) -> None:
    control = tmp_path / "inject.jsonl"
    code, output = gpucloud("agent", "inject", *args, "--control", str(control))
    assert code == 2, output
    assert says in output
    assert not control.exists()


def test_the_real_agent_without_the_nvml_module_exits_1_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    code, output = gpucloud("agent", *REAL, "--gpu-model", "H100")
    assert code == 1, output
    assert "error: no NVIDIA driver or GPU found: the nvidia-ml-py package (module pynvml) is not installed" in output
    assert "Traceback" not in output


def test_the_real_agent_without_a_driver_exits_1_saying_what_to_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(init_error=NVMLError_DriverNotLoaded))
    code, output = gpucloud("agent", *REAL, "--gpu-model", "H100")
    assert code == 1, output
    assert "no NVIDIA driver or GPU found: the NVIDIA kernel driver is not loaded" in output


def test_the_real_agent_names_what_it_is_missing() -> None:
    code, output = gpucloud("agent", "--node-id", "gpu-17", "--zone", "z", env={"GPUCLOUD_AGENT_TOKEN": None})
    assert code == 2, output
    assert "--rack, --leaf-switch, --gpu-model, --token: required for the real agent" in output
    code, output = gpucloud("agent", *REAL, "--gpu-model", "H999")
    assert code == 2, output
    assert "--gpu-model H999: no GPU model 'H999'; known are A100, H100, H200, B200, L40S" in output


def test_options_of_one_mode_are_refused_in_the_other(tmp_path: Path) -> None:
    code, output = gpucloud("agent", "--simulate", "3", "--node-id", "gpu-17")
    assert code == 2, output
    assert "--node-id: only for the real agent, not with --simulate" in output
    code, output = gpucloud("agent", *REAL, "--gpu-model", "H100", "--slow", "sim-0001=0.5")
    assert code == 2, output
    assert "--slow: only with --simulate" in output


def test_a_simulated_fleet_without_an_operator_token_says_where_to_give_one(tmp_path: Path) -> None:
    code, output = gpucloud("agent", "--simulate", "3", "--data-dir", str(tmp_path))
    assert code == 2, output
    assert "no operator token to mint the simulated nodes' agent tokens" in output


def test_a_slow_node_not_in_the_fleet_is_refused_before_anything_runs(tmp_path: Path) -> None:
    code, output = gpucloud("--token", "gpc_x_y", "agent", "--simulate", "3", "--slow", "sim-0009=0.5")
    assert code == 2, output
    assert "--slow sim-0009=0.5: give NODE=FACTOR" in output
    assert "no node 'sim-0009'" in output

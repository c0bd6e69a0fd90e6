"""``gpucloud nodes watch``: the summary of a read (counts and changes, a pure function) and the
command against a real control plane: JSON lines, --once, the interval refused, Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

from clients import models
from clients.cli.fleet_watch import CHANGES_SHOWN, STATES, FleetWatch, StateChange, summarize, summary_json
from tests.clients.cli.served import environment
from tests.clients.cli.test_connection import gpucloud
from tests.conftest import RunningControlPlane, free_port, gpu_uuids, gpucloud_command

T0 = datetime(2026, 11, 3, 14, 5, tzinfo=UTC)


def node(node_id: str, state: str, gpu_model: str = "H100") -> models.Node:
    return models.Node(
        node_id=node_id,
        gpu_model=gpu_model,
        gpus=(),
        zone="z1",
        rack="r1",
        leaf_switch="l1",
        state=state,
        cordoned=False,
        status_reason="",
        allocation_id=None,
        create_time=None,
        state_change_time=None,
    )


def test_every_state_is_counted_in_lifecycle_order_zeros_too() -> None:
    fleet = [node("n1", "READY"), node("n2", "READY", "A100"), node("n3", "BURN_IN")]
    summary = summarize(fleet, None, T0)
    assert list(summary.states) == list(STATES)
    assert STATES[:6] == ("REGISTERED", "BURN_IN", "READY", "ALLOCATED", "SCRUBBING", "DRAINING")
    assert summary.states["READY"] == 2
    assert summary.states["BURN_IN"] == 1
    assert summary.states["RETIRED"] == 0
    assert summary.total == 3
    assert summary.models["H100"] == {**dict.fromkeys(STATES, 0), "READY": 1, "BURN_IN": 1}
    assert list(summary.models) == ["A100", "H100"]
    assert (summary.changed, summary.changes) == (0, ())


def test_a_state_this_client_does_not_know_is_counted_after_the_known_ones() -> None:
    summary = summarize([node("n1", "UNKNOWN_42"), node("n2", "READY")], None, T0)
    assert list(summary.states) == [*STATES, "UNKNOWN_42"]
    assert summary.states["UNKNOWN_42"] == 1
    assert summary.total == 2


def test_changes_since_the_previous_read_name_each_node_and_its_states() -> None:
    watch = FleetWatch()
    watch.observe([node("n1", "BURN_IN"), node("n2", "BURN_IN"), node("n3", "READY")], T0)
    later = T0 + timedelta(seconds=2)
    summary = watch.observe([node("n1", "READY"), node("n2", "BURN_IN"), node("n4", "BURN_IN")], later)
    assert summary.changed == 3
    assert [str(c) for c in summary.changes] == [
        "n1 BURN_IN -> READY",
        "n3 READY -> (gone)",
        "n4 (new) -> BURN_IN",
    ]
    assert summary.changes[0] == StateChange("n1", "BURN_IN", "READY", later)
    # Nothing changed since: no change in this read, the earlier ones still in the live view.
    quiet = watch.observe([node("n1", "READY"), node("n2", "BURN_IN"), node("n4", "BURN_IN")], later)
    assert (quiet.changed, quiet.changes) == (0, ())
    assert watch.recent == summary.changes


def test_the_list_of_changes_is_bounded_and_keeps_the_last() -> None:
    count = CHANGES_SHOWN + 5
    watch = FleetWatch()
    watch.observe([node(f"n{i:02d}", "BURN_IN") for i in range(count)], T0)
    summary = watch.observe([node(f"n{i:02d}", "READY") for i in range(count)], T0)
    assert summary.changed == count
    assert [c.node_id for c in summary.changes] == [f"n{i:02d}" for i in range(5, count)]
    watch.observe([node(f"n{i:02d}", "ALLOCATED") for i in range(2)], T0)
    assert len(watch.recent) == CHANGES_SHOWN
    assert str(watch.recent[-1]) == f"n{count - 1} READY -> (gone)"


def test_the_json_object_carries_counts_total_time_and_changes() -> None:
    watch = FleetWatch()
    watch.observe([node("n1", "BURN_IN")], T0)
    document = summary_json(watch.observe([node("n1", "READY")], T0))
    assert json.loads(json.dumps(document)) == document
    assert document["read_time"] == "2026-11-03T14:05:00Z"
    assert document["total"] == 1
    assert document["states"]["READY"] == 1
    assert document["models"]["H100"]["total"] == 1
    assert document["changed"] == 1
    assert document["changes"] == [{"node_id": "n1", "from_state": "BURN_IN", "to_state": "READY"}]


def connect(plane: RunningControlPlane) -> list[str]:
    return ["--addr", plane.address, "--token", plane.operator_token]


def readings(output: str) -> list[dict[str, Any]]:
    """The watch's JSON lines; the in-process server's log lines share the output."""
    found = []
    for line in output.splitlines():
        if line.startswith('{"read_time"'):
            found.append(json.loads(line))
    return found


async def register(plane: RunningControlPlane, *node_ids: str, gpu_model: str = "H100") -> None:
    async with plane.client() as operator:
        for node_id in node_ids:
            await operator.register_node(
                node_id, gpu_model=gpu_model, gpu_uuids=gpu_uuids(node_id), zone="z1", rack="r1", leaf_switch="l1"
            )


async def test_watch_once_shows_registered_nodes_then_a_burn_in_passed(control_plane: RunningControlPlane) -> None:
    await register(control_plane, "node-1", "node-2", "node-3")
    await register(control_plane, "a100-1", gpu_model="A100")
    watch = [*connect(control_plane), "nodes", "watch", "--once", "--json", "--gpu-model", "H100"]
    code, output = await asyncio.to_thread(gpucloud, *watch)
    assert code == 0, output
    [first] = readings(output)
    assert first["total"] == 3
    assert first["states"] == {**dict.fromkeys(STATES, 0), "BURN_IN": 3}
    assert list(first["models"]) == ["H100"]

    async with control_plane.client() as operator:
        await operator.complete_burn_in("node-2")
    code, output = await asyncio.to_thread(gpucloud, *watch)
    assert code == 0, output
    [second] = readings(output)
    assert (second["states"]["BURN_IN"], second["states"]["READY"], second["total"]) == (2, 1, 3)

    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "nodes", "watch", "--once")
    assert code == 0, output
    assert "4 nodes" in output
    assert "READY" in output
    assert "A100" in output


async def test_json_lines_parse_and_ctrl_c_ends_the_watch_quietly(control_plane: RunningControlPlane) -> None:
    await register(control_plane, "node-1")
    process = await asyncio.create_subprocess_exec(
        *gpucloud_command(),
        *connect(control_plane),
        "nodes",
        "watch",
        "--interval",
        "100ms",
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment(),
    )
    try:
        assert process.stdout is not None
        lines = [(await asyncio.wait_for(process.stdout.readline(), timeout=60)).decode() for _ in range(2)]
        async with control_plane.client() as operator:
            await operator.complete_burn_in("node-1")
        while '"READY": 1' not in lines[-1]:
            lines.append((await asyncio.wait_for(process.stdout.readline(), timeout=60)).decode())
            assert lines[-1], "".join(lines)
        process.send_signal(signal.SIGINT)
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr
    assert b"Traceback" not in stderr
    parsed = [json.loads(line) for line in [*lines, *stdout.decode().splitlines()]]
    assert all(reading["total"] == 1 for reading in parsed)
    changes = [change for reading in parsed for change in reading["changes"]]
    assert changes == [{"node_id": "node-1", "from_state": "BURN_IN", "to_state": "READY"}]


def test_an_interval_of_zero_is_refused_naming_the_option() -> None:
    for interval in ("0", "0s", "-1s", "soon"):
        code, output = gpucloud("--token", "t", "nodes", "watch", "--interval", interval)
        assert code == 2, (interval, output)
        assert "--interval" in output


def test_an_unknown_gpu_model_is_refused_naming_the_option() -> None:
    code, output = gpucloud(
        "--addr", f"127.0.0.1:{free_port()}", "--token", "t", "nodes", "watch", "--gpu-model", "h999"
    )
    assert code == 2, output
    assert "--gpu-model: unknown GPU model 'h999'" in output


def test_an_unreachable_server_fails_as_any_command_does() -> None:
    address = ["--addr", f"127.0.0.1:{free_port()}", "--token", "t"]
    listed = gpucloud(*address, "nodes", "list")
    watched = gpucloud(*address, "nodes", "watch", "--once")
    assert watched[0] == listed[0] == 1
    assert watched[1] == listed[1]

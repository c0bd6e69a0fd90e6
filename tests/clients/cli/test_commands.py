"""What single ``gpucloud`` commands promise: a cancel accepted is never hidden by a failed
wait, times read as the UTC they are labelled, and ``--json`` keeps what the table mode says."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from clients.cli.app import app
from tests.clients.cli.served import environment
from tests.clients.cli.test_connection import gpucloud
from tests.conftest import RunningControlPlane, gpucloud_command, register_ready_nodes, running_control_plane


def connect(plane: RunningControlPlane) -> list[str]:
    return ["--addr", plane.address, "--token", plane.operator_token]


def document(output: str) -> Any:
    """The JSON document in a command's output; the in-process server's log lines share it."""
    parsed, _ = json.JSONDecoder().raw_decode(output[output.index("{\n") :])
    return parsed


async def allocate(plane: RunningControlPlane) -> str:
    async with plane.client() as operator:
        await register_ready_nodes(operator, 1)
        await operator.create_tenant("acme")
        allocation = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    return allocation.allocation_id


async def test_a_cancel_whose_wait_runs_out_exits_3_as_operations_wait_does(tmp_path: Path, database_url: str) -> None:
    """A scrub longer than the wait: the operation is printed not done, and the exit code is 3."""
    async with running_control_plane(tmp_path / "data", database_url, scrub_seconds=600) as plane:
        allocation_id = await allocate(plane)
        cancel = ["allocations", "cancel", allocation_id, "--wait", "--timeout", "0", "--json"]
        code, output = await asyncio.to_thread(gpucloud, *connect(plane), *cancel)
        assert code == 3, output
        operation = document(output)
        assert operation["done"] is False
        assert f"cancel accepted: {operation['name']}" in output
        assert f"not done after 0 s; wait again with: gpucloud operations wait {operation['name']}" in output


async def test_a_cancel_whose_wait_fails_names_the_accepted_operation(tmp_path: Path, database_url: str) -> None:
    """The server stops while the command waits for the release: the cancel was recorded, so
    besides the error the command names the operation to wait for, before and after the wait."""
    async with running_control_plane(tmp_path / "data", database_url, scrub_seconds=600, grace_seconds=0) as plane:
        allocation_id = await allocate(plane)
        process = await asyncio.create_subprocess_exec(
            *gpucloud_command(),
            *connect(plane),
            "allocations",
            "cancel",
            allocation_id,
            "--wait",
            "--timeout",
            "60",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=environment() | {"COLUMNS": "200"},
        )
        try:
            assert process.stderr is not None
            # The command says it is waiting once the cancel is accepted: stop the server then.
            before = ""
            while not before.endswith("to be released\n"):
                line = (await asyncio.wait_for(process.stderr.readline(), timeout=60)).decode()
                assert line, f"the command ended without saying the cancel was accepted:\n{before}"
                before += line
            accepted = re.search(r"^cancel accepted: (operations/\S+); waiting for 1 node\(s\)", before, re.MULTILINE)
            assert accepted is not None, before
            await plane.plane.stop()
            out, err = await asyncio.wait_for(process.communicate(), timeout=60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    output = before + out.decode() + err.decode()
    assert process.returncode == 1, output
    assert "error UNAVAILABLE" in output or "error CANCELLED" in output, output
    assert f"the cancel was accepted; wait for it with: gpucloud operations wait {accepted[1]}\n" in output


async def test_a_query_window_given_with_an_offset_is_titled_in_utc(control_plane: RunningControlPlane) -> None:
    window = ["--start", "2026-12-02T00:00:00+01:00", "--end", "2026-12-02T01:00:00+01:00"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "metrics", "query", *window)
    assert code == 0, output
    lines = [line.strip() for line in output.splitlines()]
    assert "all fields: samples, 2026-12-01 23:00:00 to 2026-12-02 00:00:00 UTC" in lines, output


async def test_finalize_as_json_says_whether_this_call_froze_the_invoice(control_plane: RunningControlPlane) -> None:
    async with control_plane.client() as operator:
        await operator.create_tenant("acme")
    finalize = ["invoice", "--period", "2020-01", "--tenant", "acme", "--finalize", "--json"]
    for newly in (True, False):
        code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *finalize)
        assert code == 0, output
        invoice = document(output)
        assert (invoice["finalized"], invoice["newly_finalized"]) == (True, newly)
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *finalize[:-2], "--json")
    assert code == 0, output
    assert "newly_finalized" not in document(output)  # only --finalize says what it did


def test_every_listing_takes_json() -> None:
    """Each ``list`` and ``events`` command of every resource can print its page as JSON."""
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    listings = {}
    for group_name, group in root.commands.items():
        for name, command in getattr(group, "commands", {}).items():
            if name in ("list", "events"):
                listings[f"{group_name} {name}"] = {opt for param in command.params for opt in param.opts}
    assert set(listings) >= {
        "tenants list",
        "tokens list",
        "nodes list",
        "nodes events",
        "allocations list",
        "operations list",
    }
    assert [listing for listing, options in listings.items() if "--json" not in options] == []


async def test_node_events_and_operations_list_as_json(control_plane: RunningControlPlane) -> None:
    """``--json`` prints the page as one document: its items and the next page's token."""
    allocation_id = await allocate(control_plane)
    async with control_plane.client() as operator:
        node_id = (await operator.get_allocation(allocation_id)).node_ids[0]
        await operator.cancel_allocation(allocation_id)
    events = ["nodes", "events", node_id, "--page-size", "1", "--json"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *events)
    assert code == 0, output
    page = document(output)
    assert len(page["items"]) == 1
    assert page["next_page_token"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "operations", "list", "--json")
    assert code == 0, output
    page = document(output)
    assert [operation["allocation_id"] for operation in page["items"]] == [allocation_id]
    assert page["next_page_token"] == ""


async def test_health_pause_resume_pools_and_events_say_what_is_set(control_plane: RunningControlPlane) -> None:
    """``health pause`` prints the pool's setting, ``health pools --json`` every pool's, and the
    table names the paused pool, who paused it and why; ``health events --since`` lists."""
    pause = ["health", "pause", "H100", "--reason", "exporter upgrade", "--json"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *pause)
    assert code == 0, output
    paused = document(output)
    assert (paused["gpu_model"], paused["paused"], paused["reason"]) == ("H100", True, "exporter upgrade")
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "health", "pools", "--json")
    assert code == 0, output
    pools, _ = json.JSONDecoder().raw_decode(output[output.index("[\n") :])
    assert [(pool["gpu_model"], pool["paused"]) for pool in pools] == [
        ("A100", False),
        ("H100", True),
        ("H200", False),
        ("B200", False),
        ("L40S", False),
    ]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "health", "pools")
    assert code == 0, output
    [h100] = [line for line in output.splitlines() if "H100" in line]
    assert "paused" in h100
    assert "exporter upgrade" in h100
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "health", "resume", "H100", "--json")
    assert code == 0, output
    assert document(output)["paused"] is False
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "health", "pause", "H999")
    assert code == 2, output
    assert "H999" in output
    events = ["health", "events", "--since", "1h", "--json"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *events)
    assert code == 0, output
    assert document(output) == {"items": [], "next_page_token": ""}
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "health", "events", "--since", "soon")
    assert code == 2, output
    assert "--since" in output

"""What ``gpucloud`` does with an idempotency key it cannot see used, and with ``--out -``."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from tests.clients.cli.test_connection import gpucloud
from tests.conftest import RunningControlPlane, free_port, register_ready_nodes


def _closed_address() -> str:
    """A loopback port nobody listens on: every try is refused (UNAVAILABLE)."""
    return f"127.0.0.1:{free_port()}"


def test_an_empty_request_id_is_refused_not_replaced() -> None:
    """``--request-id "$UNSET"`` would otherwise become a fresh key, and a script's retry a
    second allocation: exit 2 before any call (no server is needed to see it)."""
    code, output = gpucloud(
        "--addr", _closed_address(), "--token", "gpc_x_y", "allocations", "create", "--gpu-model", "H100",
        "--request-id", "",
    )  # fmt: skip
    assert code == 2, output
    assert "--request-id: must not be empty" in output
    assert "UNAVAILABLE" not in output  # refused before calling


def test_a_create_whose_outcome_is_unknown_names_the_key_to_retry_with() -> None:
    """The server never answered: the command says which --request-id makes the retry safe,
    the one given, or the one it made up."""
    address = _closed_address()
    create = ["--addr", address, "--token", "gpc_x_y", "allocations", "create", "--gpu-model", "H100"]
    code, output = gpucloud(*create, "--request-id", "my-key-1")
    assert code == 1, output
    assert "UNAVAILABLE" in output
    assert "to retry safely run the same command with --request-id my-key-1" in output
    code, output = gpucloud(*create)
    assert code == 1, output
    made_up = re.search(r"--request-id (\S+)", output)
    assert made_up is not None, output
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", made_up.group(1))


async def test_a_refused_create_does_not_suggest_a_retry(control_plane: RunningControlPlane) -> None:
    """Only an unknown outcome gets the hint: a refusal is an answer."""
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    async with control_plane.client() as operator:
        await operator.create_tenant("acme")
    create = ["allocations", "create", "--gpu-model", "H100", "--tenant", "acme", "--fail-if-unavailable"]
    code, output = await asyncio.to_thread(gpucloud, *connect, *create)
    assert code == 1, output
    assert "INSUFFICIENT_CAPACITY" in output
    assert "retry safely" not in output


async def test_a_rerun_with_the_same_key_says_it_was_replayed(control_plane: RunningControlPlane) -> None:
    """The first run allocates; a rerun with its --request-id answers the same allocation and
    says that nothing new was allocated (in JSON as ``"replayed": true``)."""
    async with control_plane.client() as operator:
        await register_ready_nodes(operator, 2)
        await operator.create_tenant("acme")
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    create = [*connect, "allocations", "create", "--gpu-model", "H100", "--tenant", "acme", "--request-id", "k-1"]
    code, first = await asyncio.to_thread(gpucloud, *create)
    assert code == 0, first
    assert "replayed" not in first
    code, again = await asyncio.to_thread(gpucloud, *create)
    assert code == 0, again
    assert "replayed: an earlier call with --request-id k-1 made this allocation" in again
    code, output = await asyncio.to_thread(gpucloud, *create, "--json")
    assert code == 0, output
    document = json.loads(output[output.index("{\n") :])  # after the server's log lines
    assert document["replayed"] is True
    async with control_plane.client() as operator:
        listed = await operator.list_allocations(tenant_id="acme")
    assert [a.allocation_id for a in listed] == [document["allocation_id"]]


async def test_usage_export_to_dash_writes_the_events_to_stdout(control_plane: RunningControlPlane) -> None:
    """``--out -`` streams the JSONL to stdout (and makes no file named "-")."""
    async with control_plane.client() as operator:
        await register_ready_nodes(operator, 1)
        await operator.create_tenant("acme")
        allocation = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    code, output = await asyncio.to_thread(gpucloud, *connect, "usage", "export", "--tenant", "acme", "--out", "-")
    assert code == 0, output
    events = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert len(events) == 8  # a start per GPU
    assert {event["allocation_id"] for event in events} == {allocation.allocation_id}
    assert "wrote 8 usage events to stdout" in output
    assert not await asyncio.to_thread(Path("-").exists)

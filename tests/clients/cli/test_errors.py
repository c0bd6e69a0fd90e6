"""The ``gpucloud`` client verbs' own mistakes and local failures are one line and exit 2, and
what they print for the user to paste back survives a narrow terminal."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest

from clients import NodeSamples
from tests.clients.cli.test_connection import gpucloud
from tests.conftest import RunningControlPlane, register_ready_nodes


def test_a_token_with_characters_no_token_has_is_one_line() -> None:
    for token in ("gpc_\u00e9t\u00e9", "gpc_a\tb", "gpc a"):
        code, output = gpucloud("--addr", "127.0.0.1:1", "--token", token, "tenants", "list")
        assert code == 2, output
        assert output.startswith("error: the token holds characters no bearer token has"), output


@pytest.mark.parametrize(
    "address",
    # gRPC would take a host alone as port 443 (the default port is 50051), and 99999 modulo 65536.
    # An IPv6 address goes in brackets, and no resolver takes a host with a space.
    ["http://127.0.0.1:50051", "", "127.0.0.1", "127.0.0.1:99999", "127.0.0.1:http", "::1:50051", " 127.0.0.1:50051"],
)
def test_an_address_that_is_not_host_and_port_is_one_line(address: str) -> None:
    code, output = gpucloud("--addr", address, "--token", "x", "tenants", "list")
    assert code == 2, output
    assert output.startswith(f"error: --addr {address!r}: give host:port"), output


async def test_the_next_page_token_is_printed_whole_on_one_line(control_plane: RunningControlPlane) -> None:
    """At 40 columns the hint used to fold the token over lines; pasted back, it must work."""
    async with control_plane.client() as operator:
        await register_ready_nodes(operator, 3)
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    narrow = {"COLUMNS": "40"}
    code, output = await asyncio.to_thread(gpucloud, *connect, "nodes", "list", "--page-size", "1", env=narrow)
    assert code == 0, output
    [token] = re.findall(r"^more: --page-token (\S+)$", output, flags=re.MULTILINE)
    code, output = await asyncio.to_thread(
        gpucloud, *connect, "nodes", "list", "--page-size", "1", "--page-token", token, "--json"
    )
    assert code == 0, output
    assert '"node-001"' in output


async def test_a_file_that_cannot_be_written_is_one_line(control_plane: RunningControlPlane, tmp_path: Path) -> None:
    async with control_plane.client() as operator:
        [node_id] = await register_ready_nodes(operator, 1)
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    code, output = await asyncio.to_thread(gpucloud, *connect, "usage", "export", "--out", str(tmp_path))
    assert code == 2, output
    assert f"error: --out {tmp_path}: is a directory" in output
    assert "exported" not in output  # refused before any page was fetched
    not_a_directory = tmp_path / "a-file"
    not_a_directory.write_text("")
    chart = not_a_directory / "chart.png"
    query = ["metrics", "query", "--node", node_id, "--start", "-1h", "--end", "now", "--plot", str(chart)]
    code, output = await asyncio.to_thread(gpucloud, *connect, *query)
    assert code == 2, output
    assert f"error: --plot {chart}: {not_a_directory} is not a directory" in " ".join(output.split())
    # A directory that does not exist is not made (a mistyped path would leave it behind),
    # for the export as for the chart, and both are refused before the server is asked.
    missing = tmp_path / "no-such-dir"
    code, output = await asyncio.to_thread(gpucloud, *connect, "usage", "export", "--out", str(missing / "u.jsonl"))
    assert code == 2, output
    assert f"error: --out {missing / 'u.jsonl'}: no directory {missing}" in " ".join(output.split())
    assert "wrote" not in output
    query[-1] = str(missing / "chart.png")
    code, output = await asyncio.to_thread(gpucloud, *connect, *query)
    assert code == 2, output
    assert f"error: --plot {missing / 'chart.png'}: no directory {missing}" in " ".join(output.split())
    assert "Samples" not in output
    assert "samples" not in output
    assert not missing.exists()


async def test_bad_fields_are_shown_as_the_options_that_set_them(control_plane: RunningControlPlane) -> None:
    """The server names API fields; the command shows the option or argument the user typed,
    keeping the API's name where it differs, and every violation once."""
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    create = ["allocations", "create", "--gpu-model", "H100", "--nodes", "0", "--tenant", "Bad Tenant"]
    code, output = await asyncio.to_thread(gpucloud, *connect, *create)
    assert code == 2, output
    assert "  --nodes (node_count): must be 1-256; got 0\n" in output
    assert "  --tenant (tenant_id): 'Bad Tenant' must be" in output

    gpus = [arg for i in range(7) for arg in ("--gpu-uuid", f"GPU-{i}")] + ["--gpu-uuid", "bad"]
    register = ["nodes", "register", "n1", "--gpu-model", "H100", "--zone", "", "--rack", "r", "--leaf-switch", "l"]
    code, output = await asyncio.to_thread(gpucloud, *connect, *register, *gpus)
    assert code == 2, output
    assert "  --zone: is required\n" in output
    assert "  --gpu-uuid (gpus[7].uuid): must be 'GPU-'" in output

    code, output = await asyncio.to_thread(gpucloud, *connect, "tenants", "create", "Bad Id")
    assert code == 2, output
    assert "  TENANT_ID: 'Bad Id' must be" in output


async def test_all_pages_continue_from_a_given_page_token(control_plane: RunningControlPlane) -> None:
    """--all with --page-token lists from that page to the end; a bad token is refused, not ignored."""
    async with control_plane.client() as operator:
        await register_ready_nodes(operator, 3)
        await operator.create_tenant("acme")
        created = [
            (await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")).allocation_id
            for _ in range(3)
        ]
        token = (await operator.list_allocations(page_size=1)).next_page_token
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    listing = ["allocations", "list", "--all", "--page-size", "1", "--json"]
    code, output = await asyncio.to_thread(gpucloud, *connect, *listing, "--page-token", token)
    assert code == 0, output
    # The in-process server's log lines share the captured output: the document starts at "{".
    document = json.loads(output[output.index("\n{") + 1 :])
    assert [a["allocation_id"] for a in document["items"]] == created[1::-1]
    code, output = await asyncio.to_thread(gpucloud, *connect, *listing, "--page-token", "garbage")
    assert code == 2, output
    assert "INVALID_PAGE_TOKEN" in output


def test_help_does_not_offer_the_int32_bound_as_a_limit() -> None:
    """``--nodes`` and ``--gpu`` are checked against int32 locally, but their limits are the
    server's (1-256 nodes, GPU 0-7): help used to print ``x<=2147483647`` as if it were one."""
    for command in (["allocations", "create"], ["metrics", "query"], ["metrics", "write"], ["nodes", "list"]):
        code, output = gpucloud(*command, "--help")
        assert code == 0, output
        assert "2147483647" not in output, (command, output)
    code, output = gpucloud(
        "--addr", "127.0.0.1:1", "--token", "x", "allocations", "create", "--gpu-model", "H100", "--nodes", "1e3"
    )
    assert code == 2, output
    assert "'1e3' is not an integer" in output


def test_a_negative_wait_is_a_usage_error() -> None:
    code, output = gpucloud(
        "--addr", "127.0.0.1:1", "--token", "x", "operations", "wait", "operations/op-1", "--timeout", "-5"
    )
    assert code == 2, output


async def test_values_refused_before_or_by_the_server_name_their_options(control_plane: RunningControlPlane) -> None:
    async with control_plane.client() as operator:
        [node_id] = await register_ready_nodes(operator, 1)
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    cases = [
        (["allocations", "create", "--gpu-model", "h999"], 2, "error: --gpu-model: unknown GPU model 'h999'"),
        (["allocations", "list", "--state", "bogus"], 2, "error: --state: unknown allocation state 'bogus'"),
        (["metrics", "query", "--step", "1m", "--agg", "median"], 2, "error: --agg: unknown aggregation 'median'"),
        (["metrics", "query", "--start", "now", "--end", "-1h"], 2, "error: --end '-1h' must be after --start 'now'"),
        (
            ["usage", "export", "--start", "now", "--end", "-1h", "--out", "-"],
            2,
            "error: --end '-1h' must be after --start 'now'",
        ),
        (
            ["invoice", "--period", "2026-11", "--finalize"],
            2,
            "--finalize needs --tenant (finalizing is for operators)",
        ),
        (["metrics", "query", "--start", "-1d", "--step", "1ms"], 2, "  --step (step_ms): cuts the window"),
        (["metrics", "write", node_id, "--gpu", "-1", "--set", "power_w=1"], 2, "  --gpu (nodes[0].gpus[0].gpu_index)"),
        (["allocations", "create", "--gpu-model", "H100", "--nodes", str(2**40)], 2, "--nodes"),
    ]
    for args, exit_code, expected in cases:
        code, output = await asyncio.to_thread(gpucloud, *connect, *args)
        assert code == exit_code, (args, output)
        assert expected in output, (args, output)


async def test_a_bad_value_exits_2_whether_click_the_client_or_the_server_refused_it(
    control_plane: RunningControlPlane,
) -> None:
    """The server's INVALID_ARGUMENT for a field an option set is a usage error, as click's own
    range checks are: ``--nodes 0`` and ``--nodes 99999999999`` exit alike, and so does an
    option left out that the call needed. Errors that are not about the command line keep exit
    code 1."""
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    cases = [
        (["allocations", "create", "--gpu-model", "H100", "--nodes", "0"], "--nodes (node_count): must be 1-256"),
        (["allocations", "create", "--gpu-model", "H100", "--nodes", "99999999999"], "--nodes"),
        (["metrics", "query", "--start", "-1d", "--step", "1ms"], "--step (step_ms)"),
        (["metrics", "query", "--step", "0s"], "--step"),
        # Left out where the call needs it (an operator allocates for a named tenant).
        (["allocations", "create", "--gpu-model", "H100"], "--tenant (tenant_id): is required"),
    ]
    for args, expected in cases:
        code, output = await asyncio.to_thread(gpucloud, *connect, *args)
        assert code == 2, (args, output)
        assert expected in output, (args, output)
    code, output = await asyncio.to_thread(gpucloud, *connect, "nodes", "get", "nosuch")
    assert code == 1, output
    assert "NODE_NOT_FOUND" in output


async def test_set_values_are_checked_and_named_as_set(control_plane: RunningControlPlane) -> None:
    """A field given twice, an empty name or a number that is not finite is refused before the
    call, naming --set; a field name the server refuses is shown as --set too."""
    async with control_plane.client() as operator:
        [node_id] = await register_ready_nodes(operator, 1)
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    write = ["metrics", "write", node_id, "--gpu", "0"]
    cases = [
        (["--set", "power_w=5", "--set", "power_w=6"], "error: --set 'power_w=6': power_w is given more than once"),
        (["--set", "power_w=nan"], "error: --set 'power_w=nan': the number must be finite"),
        (["--set", "power_w=inf"], "error: --set 'power_w=inf': the number must be finite"),
        (["--set", "power_w=-inf"], "error: --set 'power_w=-inf': the number must be finite"),
        (["--set", "=5"], "error: --set '=5': expected FIELD=NUMBER"),
        (["--set", "Power W=5"], "  --set (nodes[0].gpus[0].fields['Power W']): "),
    ]
    for args, expected in cases:
        code, output = await asyncio.to_thread(gpucloud, *connect, *write, *args)
        assert code == 2, (args, output)
        assert expected in output, (args, output)
        assert "wrote" not in output, (args, output)
    async with control_plane.client() as operator:
        # Nothing was written by the refused commands.
        assert (await operator.query_metrics(start=0, end=2**42, node_ids=[node_id])).series == []


async def test_agg_without_step_is_refused(control_plane: RunningControlPlane) -> None:
    """Without --step the query returns raw samples: an --agg would be silently ignored."""
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    code, output = await asyncio.to_thread(gpucloud, *connect, "metrics", "query", "--agg", "max")
    assert code == 2, output
    assert "error: --agg max: needs --step" in output
    code, output = await asyncio.to_thread(gpucloud, *connect, "metrics", "query", "--step", "1m", "--agg", "max")
    assert code == 0, output
    assert "max per 1m" in output


@pytest.mark.parametrize("value", ["inf", "1e400"])
async def test_a_wait_timeout_that_is_not_finite_is_refused_before_the_cancel(
    control_plane: RunningControlPlane, value: str
) -> None:
    """The option's ``min=0`` lets inf through: the cancel was carried out, then the wait refused
    the timeout and the command exited 2 after its side effect. (typer refuses nan itself.)"""
    async with control_plane.client() as operator:
        await register_ready_nodes(operator, 1)
        await operator.create_tenant("acme")
        allocation = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    cancel = ["allocations", "cancel", allocation.allocation_id, "--wait", "--timeout", value]
    code, output = await asyncio.to_thread(gpucloud, *connect, *cancel)
    assert code == 2, output
    assert "--timeout" in output
    assert "cancel" not in output
    async with control_plane.client() as operator:
        assert (await operator.get_allocation(allocation.allocation_id)).state == "ACTIVE"


def test_an_operations_wait_timeout_that_is_not_finite_is_refused_first() -> None:
    """Refused as the command line it is, before the token is looked for or a server called."""
    code, output = gpucloud("--addr", "127.0.0.1:1", "operations", "wait", "operations/op-1", "--timeout", "inf")
    assert code == 2, output
    assert output == "error: --timeout inf: must be a finite number of seconds, 0 or more\n", output


async def test_a_refused_value_exits_2_only_when_the_user_typed_it(control_plane: RunningControlPlane) -> None:
    """``metrics write`` without --time writes at "now": a sample stored later makes the server
    refuse ``nodes[0].timestamp_ms`` (SAMPLES_OUT_OF_ORDER), which --time sets but nobody typed,
    so it is exit 1 as other API errors; the same refusal of a --time given is exit 2."""
    async with control_plane.client() as operator:
        [node_id] = await register_ready_nodes(operator, 1)
        newest = int(time.time() * 1000) + 60_000
        await operator.write_samples([NodeSamples(node_id, newest, {0: {"power_w": 300.0}})])
    connect = ["--addr", control_plane.address, "--token", control_plane.operator_token]
    write = ["metrics", "write", node_id, "--gpu", "0", "--set", "power_w=1"]
    code, output = await asyncio.to_thread(gpucloud, *connect, *write)
    assert code == 1, output
    assert "SAMPLES_OUT_OF_ORDER" in output
    code, output = await asyncio.to_thread(gpucloud, *connect, *write, "--time", str(newest - 1000))
    assert code == 2, output
    assert "SAMPLES_OUT_OF_ORDER" in output
    assert "--time (nodes[0].timestamp_ms)" in output

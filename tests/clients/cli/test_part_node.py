"""``gpucloud allocations`` with part of one node: ``create --gpus/--mig/--share/--cpu/--memory``
without ``--nodes``, ``--wait`` until the scheduler admits it, a PART column in the tables where a
row asks for part of a node, the GPUs it holds under ``get``, and every new field in ``--json``."""

from __future__ import annotations

import asyncio
import re

from clients import models
from clients.cli import render
from tests.clients.cli.test_commands import connect, document
from tests.clients.cli.test_connection import gpucloud
from tests.conftest import RunningControlPlane, register_ready_nodes

CREATE = ["allocations", "create", "--gpu-model", "H100", "--tenant", "acme"]


async def _one_free_node(plane: RunningControlPlane) -> str:
    """One READY H100 node and the tenant acme: the node's id."""
    async with plane.client() as operator:
        [node] = await register_ready_nodes(operator, 1)
        await operator.create_tenant("acme")
    return node


def _flat(output: str) -> str:
    """The output without the tables' borders, every run of spaces and line breaks as one space."""
    return " ".join(output.replace("│", " ").replace("┃", " ").split())


async def test_two_gpus_with_wait_print_active_and_get_shows_the_holds(control_plane: RunningControlPlane) -> None:
    node = await _one_free_node(control_plane)
    create = [*CREATE, "--gpus", "2", "--wait", "--timeout", "60"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *create)
    assert code == 0, output
    assert "Allocated" in output
    assert "ACTIVE" in output
    assert "2 GPUs" in _flat(output)
    found = re.search(r"(alloc-[0-9a-f]+)", output)
    assert found is not None, output
    allocation_id = found[1]

    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "allocations", "get", allocation_id)
    assert code == 0, output
    flat = _flat(output)
    assert "PART" in flat
    assert "GPU holds" in flat
    assert re.search(rf"{node} 0 GPU-{node}-00 whole GPU", flat), output
    assert re.search(rf"{node} 1 GPU-{node}-01 whole GPU", flat), output

    get = ["allocations", "get", allocation_id, "--json"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *get)
    assert code == 0, output
    shown = document(output)
    assert (shown["state"], shown["gpus"], shown["node_count"], shown["node_ids"]) == ("ACTIVE", 2, 0, [node])
    assert (shown["mig_profile"], shown["share_milli"], shown["cpu_milli"], shown["memory_mib"]) == ("", 0, 0, 0)
    assert [(h["node_id"], h["milli"], h["mig_start"]) for h in shown["gpu_holds"]] == [(node, 1000, -1)] * 2


async def test_create_json_carries_what_it_asks_and_the_list_says_it_in_words(
    control_plane: RunningControlPlane,
) -> None:
    await _one_free_node(control_plane)
    create = [*CREATE, "--gpus", "2", "--cpu", "8.5", "--memory", "65536", "--json"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *create)
    assert code == 0, output
    created = document(output)
    assert (created["state"], created["node_count"], created["gpus"]) == ("ACTIVE", 0, 2)
    assert (created["cpu_milli"], created["memory_mib"], len(created["gpu_holds"])) == (8500, 65536, 2)

    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "allocations", "list")
    assert code == 0, output
    flat = _flat(output)
    # The PART cell may fold at its spaces on a terminal this wide.
    assert "PART" in flat
    assert "2 GPUs, CPU 8.5," in flat
    assert "65536 MiB" in flat


async def test_nodes_with_part_of_a_node_is_a_usage_error(control_plane: RunningControlPlane) -> None:
    await _one_free_node(control_plane)
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *CREATE, "--nodes", "1", "--gpus", "2")
    assert code == 2, output
    assert "--nodes: whole nodes; leave it out with --gpus" in _flat(output)


async def test_a_bad_combination_is_refused_naming_the_option(control_plane: RunningControlPlane) -> None:
    await _one_free_node(control_plane)
    create = [*CREATE, "--gpus", "2", "--share", "100"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *create)
    assert code == 2, output
    assert "error INVALID_ARGUMENT" in output
    assert "--share (share_milli): give at most one of gpus, mig_profile and share_milli" in _flat(output)


def test_cpu_cores_must_be_a_finite_number() -> None:
    for bad in ("nan", "inf", "four", "0.0001"):
        code, output = gpucloud("--token", "t", *CREATE, "--cpu", bad)
        assert code == 2, (bad, output)
        assert "--cpu" in output


def test_the_part_column_is_shown_only_where_a_row_asks_for_part_of_a_node() -> None:
    whole = models.Allocation("alloc-1", "acme", "H100", 2, "ACTIVE", ("node-000", "node-001"), None)
    mig = models.Allocation("alloc-2", "acme", "H100", 0, "PENDING", (), None, mig_profile="3g.40gb")
    share = models.Allocation("alloc-3", "acme", "H100", 0, "PENDING", (), None, share_milli=250)
    cpu = models.Allocation("alloc-4", "acme", "H100", 0, "PENDING", (), None, cpu_milli=4000, memory_mib=16384)
    assert [render.part_asked(a) for a in (whole, mig, share, cpu)] == [
        "-",
        "MIG 3g.40gb",
        "share 250/1000",
        "CPU 4, 16384 MiB",
    ]
    assert "PART" not in [c.header for c in render.allocations_table([whole]).columns]
    headers = [c.header for c in render.allocations_table([whole, mig, share, cpu]).columns]
    assert headers.index("PART") == headers.index("NODES") + 1


def test_holds_read_as_whole_gpus_fractions_and_cpu_and_memory_alone() -> None:
    holds = (
        models.GpuHold("node-000", 3, "GPU-node-000-03", 500, 4),
        models.GpuHold("node-000", -1, "", 0, -1),
    )
    assert [render.held(h) for h in holds] == ["500/1000", "CPU and memory"]
    assert render.held(models.GpuHold("node-000", 0, "GPU-node-000-00", 1000, -1)) == "whole GPU"
    allocation = models.Allocation("alloc-1", "acme", "H100", 0, "ACTIVE", ("node-000",), None, gpu_holds=holds)
    grid = render.gpu_holds_table(allocation)
    assert [c.header for c in grid.columns] == ["NODE", "GPU", "UUID", "HELD", "MIG START"]

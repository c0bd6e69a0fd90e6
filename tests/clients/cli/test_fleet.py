"""``gpucloud fleet fragmentation`` and ``fleet defrag --plan|--apply``: each pool's free capacity
as tables, JSON or a PNG picture of its nodes by leaf switch, a defragmentation plan that moves
nothing, and its moves made once the operator says yes. How the tables show them, and against a
real server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clients import models
from clients.cli import fleet, render
from clients.cli.app import app
from tests.clients.cli.rendered import rendered, words
from tests.clients.cli.test_commands import connect, document
from tests.clients.cli.test_connection import gpucloud
from tests.clients.test_fragmentation import HELD, partly_held_fleet
from tests.conftest import RunningControlPlane

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _node(node_id: str, leaf: str, state: str = "READY", **fields: Any) -> models.NodeCapacity:
    made = {"free_gpus": 8 if state == "READY" else 0, "stranded": False, "allocation_id": None, **fields}
    return models.NodeCapacity(node_id, leaf, state, **made)


def _pool() -> models.PoolFragmentation:
    """Two switches: leaf-0 one free, one held; leaf-1 one free, one stranded, one burning in."""
    nodes = (
        _node("n-0", "leaf-0"),
        _node("n-1", "leaf-0", "ALLOCATED", allocation_id="alloc-1"),
        _node("n-2", "leaf-1"),
        _node("n-3", "leaf-1", free_gpus=0, stranded=True),
        _node("n-4", "leaf-1", "BURN_IN"),
    )
    return models.PoolFragmentation("H100", 5, 2, 16, 1, 8, nodes)


def _rows(text: str) -> list[list[str]]:
    """The body rows of the tables in ``text`` (a header's borders are heavy: ┃)."""
    return [words(line) for line in text.splitlines() if "│" in line]


def _flat(output: str) -> str:
    """The output without column borders, every run of spaces and line breaks as one space."""
    return " ".join(output.replace("│", " ").split())


def _listed(output: str) -> Any:
    """The JSON list in a command's output; the in-process server's log lines share it."""
    lines = output.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip() in ("[", "[]"))
    parsed, _ = json.JSONDecoder().raw_decode("".join(lines[start:]))
    return parsed


# Tables and the picture -----------------------------------------------------------------------


def test_each_node_is_free_held_stranded_or_other() -> None:
    assert [render.capacity_kind(n) for n in _pool().node_capacity] == ["free", "held", "free", "stranded", "other"]


def test_the_pool_table_shows_its_free_capacity_and_why_the_largest_block_is_smaller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = rendered(monkeypatch, render.fragmentation_table([_pool()]))
    header = next(line for line in text.splitlines() if "MODEL" in line)
    assert " ".join(words(header)) == "MODEL NODES FREE NODES FREE GPUS LARGEST FREE BLOCK STRANDED GPUS"
    assert ["H100", "5", "2", "16", "1", "8"] in _rows(text)
    assert "the free nodes are spread over leaf switches" in _flat(text)


def test_no_pools_say_that_no_node_is_in_service(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "none: no nodes in service" in rendered(monkeypatch, render.fragmentation_table([]))


def test_the_leaf_switch_table_counts_each_switchs_nodes_free_and_held(monkeypatch: pytest.MonkeyPatch) -> None:
    text = rendered(monkeypatch, render.leaf_switches_table(_pool()))
    assert "H100: by leaf switch" in text
    assert _rows(text) == [["leaf-0", "2", "1", "1"], ["leaf-1", "3", "1", "0"]]


def test_the_plan_tables_show_each_move_and_what_it_costs(monkeypatch: pytest.MonkeyPatch) -> None:
    moves = [models.DefragmentationMove("alloc-1", "acme", "n-8", "n-1")]
    costs = [models.DefragmentationCost("alloc-1", "acme", 1, 2)]
    text = rendered(monkeypatch, render.defrag_moves_table(moves))
    assert "ALLOCATION TENANT FROM TO" in _flat(text.replace("┃", " "))
    assert _rows(text) == [["alloc-1", "acme", "n-8", "n-1"]]
    text = rendered(monkeypatch, render.defrag_costs_table(costs))
    assert "ALLOCATION TENANT NODES MOVED NODE COUNT" in _flat(text.replace("┃", " "))
    assert _rows(text) == [["alloc-1", "acme", "1", "2"]]


@pytest.mark.parametrize("pools", [[], [_pool()], [_pool(), models.PoolFragmentation("A100", 0, 0, 0, 0, 0, ())]])
def test_the_picture_is_a_png_however_many_pools_and_nodes(tmp_path: Path, pools: list[Any]) -> None:
    path = tmp_path / "capacity.png"
    fleet.draw_capacity(pools, path)
    assert path.read_bytes().startswith(PNG_SIGNATURE)


def test_a_pool_too_wide_to_label_each_node_is_still_drawn(tmp_path: Path) -> None:
    wide = tuple(_node(f"n-{i}", f"leaf-{i // 64}") for i in range(256))
    path = tmp_path / "wide.png"
    fleet.draw_capacity([models.PoolFragmentation("H100", 256, 256, 2048, 64, 0, wide)], path)
    assert path.read_bytes().startswith(PNG_SIGNATURE)


# Against a server -----------------------------------------------------------------------------


async def test_fragmentation_prints_each_pool_and_its_switches_and_draws_the_picture(
    control_plane: RunningControlPlane, tmp_path: Path
) -> None:
    async with control_plane.client() as operator:
        await partly_held_fleet(operator)
        await operator.cordon_node("node-015", "fan fault")
    picture = tmp_path / "capacity.png"
    code, output = await asyncio.to_thread(
        gpucloud, *connect(control_plane), "fleet", "fragmentation", "--png", str(picture)
    )
    assert code == 0, output
    rows = _rows(output)
    assert ["H100", "16", "10", "80", "5", "8"] in rows
    assert ["leaf-0", "8", "5", "3"] in rows
    assert ["leaf-1", "8", "5", "2"] in rows
    assert f"picture written to {picture}" in output
    assert picture.read_bytes().startswith(PNG_SIGNATURE)

    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "fleet", "fragmentation", "--json")
    assert code == 0, output
    [pool] = _listed(output)
    assert {k: pool[k] for k in ("gpu_model", "nodes", "free_nodes", "largest_free_block", "stranded_gpus")} == {
        "gpu_model": "H100",
        "nodes": 16,
        "free_nodes": 10,
        "largest_free_block": 5,
        "stranded_gpus": 8,
    }
    assert [n["node_id"] for n in pool["node_capacity"] if n["allocation_id"]] == list(HELD)


async def test_fragmentation_refuses_a_png_path_in_no_directory_before_calling(
    control_plane: RunningControlPlane, tmp_path: Path
) -> None:
    nowhere = tmp_path / "no-such-dir" / "capacity.png"
    code, output = await asyncio.to_thread(
        gpucloud, *connect(control_plane), "fleet", "fragmentation", "--png", str(nowhere)
    )
    assert code == 2, output
    assert "--png" in output
    assert not nowhere.parent.exists()


async def test_defrag_without_plan_or_apply_refuses_saying_what_each_does(
    control_plane: RunningControlPlane,
) -> None:
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "fleet", "defrag", "--gpu-model", "H100")
    assert code == 2, output
    assert "--plan to see the moves" in _flat(output)
    assert "or --apply to see them and, on your go, make them" in _flat(output)
    both = ["fleet", "defrag", "--plan", "--apply", "--gpu-model", "H100"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *both)
    assert (code, _flat(output)) == (2, "error: fleet defrag: --plan or --apply, not both")
    no_answer = ["fleet", "defrag", "--apply", "--json", "--gpu-model", "H100"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *no_answer)
    assert code == 2, output
    assert "--json with --apply needs --yes" in output
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "fleet", "defrag", "--plan")
    assert code == 2, output
    assert "--gpu-model" in output


async def test_defrag_plan_prints_the_summary_moves_and_costs_and_nothing_moves(
    control_plane: RunningControlPlane,
) -> None:
    async with control_plane.client() as operator:
        allocation_ids = await partly_held_fleet(operator)
        nodes_before = [(n.node_id, n.state, n.allocation_id) for n in await operator.list_nodes()]
        allocations_before = {a.allocation_id: a.node_ids for a in await operator.list_allocations()}
    on = dict(zip(HELD, allocation_ids, strict=True))
    plan = ["fleet", "defrag", "--plan", "--gpu-model", "H100"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *plan)
    assert code == 0, output
    flat = _flat(output)
    assert "frees leaf-1 whole" in flat
    assert "a plan only: nothing has moved" in flat
    moves = [row for row in _rows(output) if len(row) == 4 and row[2] in ("node-008", "node-009")]
    assert [row[:3] for row in moves] == [[on["node-008"], "beta", "node-008"], [on["node-009"], "acme", "node-009"]]
    assert [on["node-008"], "beta", "1", "1"] in _rows(output)

    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *plan, "--blocks", "2", "--json")
    assert code == 0, output
    made = document(output)
    assert made["freed_leaf_switches"] == ["leaf-1"]
    assert [m["from_node_id"] for m in made["moves"]] == ["node-008", "node-009"]
    assert [(c["nodes_moved"], c["node_count"]) for c in made["costs"]] == [(1, 1), (1, 1)]
    assert "only 1 of the 2 asked" in made["summary"]

    async with control_plane.client() as operator:
        assert [(n.node_id, n.state, n.allocation_id) for n in await operator.list_nodes()] == nodes_before
        assert {a.allocation_id: a.node_ids for a in await operator.list_allocations()} == allocations_before


async def test_bad_defrag_values_exit_2_naming_the_option(control_plane: RunningControlPlane) -> None:
    plan = ["fleet", "defrag", "--plan", "--gpu-model", "H100", "--blocks", "-1"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *plan)
    assert code == 2, output
    assert "--blocks: must be 0 to 10,000, not -1" in output
    plan = ["fleet", "defrag", "--plan", "--gpu-model", "H999"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *plan)
    assert code == 2, output
    assert "--gpu-model: unknown GPU model 'H999'" in output


def _answering(answer: str, *args: str) -> tuple[int, str]:
    """Run ``gpucloud`` with ``answer`` typed at its question."""
    result = CliRunner().invoke(app, list(args), input=answer, env={"GPUCLOUD_TOKEN": None, "COLUMNS": "160"})
    return result.exit_code, result.output


async def test_defrag_apply_shows_the_plan_and_moves_only_on_the_operators_yes(
    control_plane: RunningControlPlane,
) -> None:
    async with control_plane.client() as operator:
        allocation_ids = await partly_held_fleet(operator)
    on = dict(zip(HELD, allocation_ids, strict=True))
    apply = [*connect(control_plane), "fleet", "defrag", "--apply", "--gpu-model", "H100"]

    code, output = await asyncio.to_thread(_answering, "n\n", *apply)
    assert code == 1, output
    flat = _flat(output)
    assert "frees leaf-1 whole" in flat
    assert "Move 2 node(s) of 2 allocation(s)? Each move checkpoints and restarts the work on its node" in flat
    assert "nothing has moved" in flat
    async with control_plane.client() as operator:
        assert (await operator.get_allocation(on["node-008"])).node_ids == ("node-008",)

    code, output = await asyncio.to_thread(_answering, "y\n", *apply)
    assert code == 0, output
    assert "moved 2 node(s) of 2 allocation(s); once the nodes left finish their scrub, leaf switch(es) leaf-1" in (
        _flat(output)
    )
    moved = [row for row in _rows(output) if len(row) == 4 and row[2] in ("node-008", "node-009")]
    async with control_plane.client() as operator:
        for allocation_id, _, from_node, to_node in moved:
            assert (await operator.get_allocation(allocation_id)).node_ids == (to_node,)
            assert from_node in ("node-008", "node-009")

    # leaf-1 is wholly free, and nothing would move into it: no plan, nothing asked or moved.
    code, output = await asyncio.to_thread(gpucloud, *apply, "--json", "--yes")
    assert code == 0, output
    made = document(output)
    assert (made["plan"]["moves"], made["applied"]) == ([], None)

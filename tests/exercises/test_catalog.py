"""The catalog, ``list``, ``show`` and ``start``: every exercise complete on disk, and the
starter holding nothing of the answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from clients.cli.app import app
from exercises import catalog

ROOT = Path(__file__).resolve().parents[2]


def gpucloud(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.mark.parametrize("exercise", catalog.EXERCISES, ids=lambda e: e.id)
def test_every_exercise_has_its_files(exercise: catalog.Exercise) -> None:
    # The prompt, and how the reference does it (which ``start`` does not write).
    assert sorted(p.stem for p in exercise.folder.glob("*.md")) == ["README", "reference"]
    assert exercise.starter.is_file()
    assert exercise.suite.is_file()


def _declares(source: str, name: str) -> bool:
    """Whether ``source`` defines the function ``name``, or for ``Class.method`` the class and a
    method of that name."""
    owner, _, function = name.rpartition(".")
    return f"def {function}(" in source and (not owner or f"class {owner}" in source)


@pytest.mark.parametrize("exercise", catalog.EXERCISES, ids=lambda e: e.id)
def test_the_starter_declares_every_function_and_answers_none(exercise: catalog.Exercise) -> None:
    starter = exercise.starter.read_text()
    declared = [name for name in exercise.functions if _declares(starter, name)]
    assert declared == list(exercise.functions)
    assert starter.count("raise NotImplementedError") == len(exercise.functions)


def test_list_names_each_exercise_and_nothing_coming() -> None:
    result = gpucloud("exercises", "list", "--json")
    listed = json.loads(result.stdout)
    assert [e["id"] for e in listed["exercises"]] == [e.id for e in catalog.EXERCISES]
    assert listed["exercises"][0]["reference"] == ["accounting.intervals"]
    assert listed["coming"] == []
    assert result.exit_code == 0


def test_list_as_a_table_with_no_empty_coming_table() -> None:
    result = gpucloud("exercises", "list")
    assert "interval-union" in result.stdout
    assert "services.nodes.transitions, services.health.policy" in result.stdout
    assert "exercises.allocation_policies.adapter, scheduling" in result.stdout
    assert "Coming" not in result.stdout
    assert result.exit_code == 0


def test_an_exercise_still_coming_is_listed_apart_and_named_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    # The catalog is plain data: one entry coming stands for any that a later exercise adds.
    coming = catalog.Coming(
        id="gang-reservations",
        title="Reserve a block for a waiting gang",
        question="Backfill that never delays the gang at the head of the queue.",
        awaits="reservations in scheduling/",
    )
    monkeypatch.setattr(catalog, "COMING", (coming,))
    listed = gpucloud("exercises", "list")
    assert "Coming" in listed.stdout
    assert "gang-reservations" in listed.stdout
    assert json.loads(gpucloud("exercises", "list", "--json").stdout)["coming"][0]["awaits"] == coming.awaits
    shown = gpucloud("exercises", "show", "gang-reservations")
    assert "'gang-reservations' is coming (reservations in scheduling/)" in shown.stderr
    assert shown.exit_code == 2


def test_show_renders_the_prompt() -> None:
    result = gpucloud("exercises", "show", "node-health")
    assert "The node state machine and health strikes" in result.stdout
    assert "The trap" in result.stdout
    assert result.exit_code == 0


def test_start_writes_the_starter_and_the_prompt_and_never_overwrites(tmp_path: Path) -> None:
    first = gpucloud("exercises", "start", "usage-billing", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "billing.py"]
    assert (tmp_path / "billing.py").read_text() == catalog.find("usage-billing").starter.read_text()
    assert first.exit_code == 0
    again = gpucloud("exercises", "start", "usage-billing", tmp_path)
    assert "already exist" in again.stderr
    assert again.exit_code == 1


def test_the_docs_map_each_exercise_to_its_question_and_module() -> None:
    text = (ROOT / "docs" / "exercises.md").read_text()
    missing = [
        (e.id, module) for e in catalog.EXERCISES for module in e.reference if e.id not in text or module not in text
    ]
    missing += [(c.id, "coming") for c in catalog.COMING if c.id not in text]
    assert missing == []

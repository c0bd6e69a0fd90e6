"""``gpucloud exercises``: every suite passes the reference and rejects each known-wrong answer
with the hint that names its mistake, and a candidate grows an answer one function at a time.

Each check runs the suite the way a candidate does, through the command, in a pytest process.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from clients.cli.app import app
from exercises import catalog

ROOT = Path(__file__).resolve().parents[2]
INTERVALS = catalog.find("interval-union")


def gpucloud(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def check(*args: str | Path) -> tuple[int, dict[str, Any]]:
    """``gpucloud exercises check ARGS --json``: the exit code and the report."""
    result = gpucloud("exercises", "check", *args, "--json")
    assert result.stdout.lstrip().startswith("{"), result.output
    return result.exit_code, json.loads(result.stdout)


def outcomes(report: dict[str, Any]) -> dict[str, str]:
    return {case["name"]: case["outcome"] for case in report["cases"]}


def test_every_exercise_passes_on_the_reference() -> None:
    code, report = check()
    assert [r["exercise"] for r in report["exercises"]] == [e.id for e in catalog.EXERCISES]
    assert {r["exercise"]: r["reference"] for r in report["exercises"]} == {e.id: True for e in catalog.EXERCISES}
    failing = {r["exercise"]: r["score"] for r in report["exercises"] if r["score"]["passed"] != r["score"]["total"]}
    assert failing == {}
    assert code == 0


WRONG = [(exercise, path) for exercise in catalog.EXERCISES for path in exercise.wrong]


@pytest.mark.parametrize("exercise", catalog.EXERCISES, ids=lambda e: e.id)
def test_every_exercise_ships_two_known_wrong_answers(exercise: catalog.Exercise) -> None:
    assert len(exercise.wrong) >= 2


@pytest.mark.parametrize(("exercise", "wrong"), WRONG, ids=[f"{e.id}/{p.stem}" for e, p in WRONG])
def test_a_known_wrong_answer_is_rejected_with_the_hint_naming_its_mistake(
    exercise: catalog.Exercise, wrong: Path
) -> None:
    code, report = check(exercise.id, "--impl", wrong)
    failed = [case for case in report["cases"] if case["outcome"] == "failed"]
    assert report["implementation"] == str(wrong)
    assert failed != []
    assert [c["name"] for c in failed if wrong.stem in c["mistakes"]] != [], failed
    assert code == 1


def test_a_failure_prints_the_counterexample_the_hint_and_the_score() -> None:
    wrong = INTERVALS.folder / "wrong" / "double_counts_overlaps.py"
    result = gpucloud("exercises", "check", "interval-union", "--impl", wrong)
    assert f"interval-union: your implementation, {wrong}" in result.stdout
    assert "FAILED test_total_counts_each_unit_once" in result.stdout
    assert "Failing test case" in result.stdout
    assert "hint: overlapping intervals are counted twice" in result.stdout
    assert re.search(r"score: 7/10 passed", result.stdout)
    assert result.exit_code == 1


def test_the_reference_run_names_the_reference() -> None:
    result = gpucloud("exercises", "check", "interval-union")
    assert "interval-union: the reference, accounting.intervals" in result.stdout
    assert "score: 10/10 passed" in result.stdout
    assert result.exit_code == 0


def test_an_answer_grows_one_function_at_a_time(tmp_path: Path) -> None:
    started = gpucloud("exercises", "start", "interval-union", tmp_path / "answer")
    assert started.exit_code == 0, started.output
    answer = tmp_path / "answer" / "intervals.py"

    code, blank = check("interval-union", "--impl", tmp_path / "answer")
    assert set(outcomes(blank).values()) == {"not implemented yet"}
    assert blank["score"] == {"passed": 0, "failed": 0, "not_implemented": 10, "total": 10}
    assert code == 1

    # union written: its own cases pass, every other function's are still to write.
    body = "    return [Interval(a, b) for a, b in _merged(intervals)]\n"
    helper = (
        "\n\ndef _merged(intervals: Iterable[Interval]) -> list[tuple[int, int]]:\n"
        "    out: list[tuple[int, int]] = []\n"
        "    for i in sorted(i for i in intervals if i.end > i.start):\n"
        "        if out and i.start <= out[-1][1]:\n"
        "            out[-1] = (out[-1][0], max(out[-1][1], i.end))\n"
        "        else:\n"
        "            out.append((i.start, i.end))\n"
        "    return out\n"
    )
    text = answer.read_text()
    union_stub = '    """The disjoint, sorted, non-touching intervals covering exactly what the inputs cover."""\n'
    answer.write_text(text.replace(union_stub + "    raise NotImplementedError\n", union_stub + body) + helper)
    _, one = check("interval-union", "--impl", answer)
    by_function = {case["functions"][0]: case["outcome"] for case in one["cases"]}
    assert by_function.pop("union") == "passed"
    assert set(by_function.values()) == {"not implemented yet"}


def test_the_whole_answer_passes() -> None:
    code, report = check("interval-union", "--impl", ROOT / "accounting" / "intervals.py")
    assert report["reference"] is False
    assert set(outcomes(report).values()) == {"passed"}
    assert code == 0


def test_a_misspelt_impl_path_is_an_error_before_anything_runs(tmp_path: Path) -> None:
    result = gpucloud("exercises", "check", "interval-union", "--impl", tmp_path / "answr.py")
    assert "no such file; nothing was run" in result.stderr
    assert result.stdout == ""
    assert result.exit_code == 2


def test_a_directory_without_the_answer_file_is_an_error(tmp_path: Path) -> None:
    result = gpucloud("exercises", "check", "interval-union", "--impl", tmp_path)
    assert "holds no intervals.py" in result.stderr
    assert result.exit_code == 2


def test_an_answer_that_does_not_import_is_an_error(tmp_path: Path) -> None:
    broken = tmp_path / "intervals.py"
    broken.write_text("def union(:\n")
    code, report = check("interval-union", "--impl", broken)
    assert "SyntaxError" in report["error"]
    assert code == 1


def test_an_unknown_exercise_names_the_known_ones() -> None:
    result = gpucloud("exercises", "check", "interval-unoin")
    assert "no exercise 'interval-unoin'; the exercises are: interval-union" in result.stderr
    assert result.exit_code == 2


def test_impl_without_an_exercise_is_a_usage_error(tmp_path: Path) -> None:
    result = gpucloud("exercises", "check", "--impl", tmp_path)
    assert "--impl needs the exercise it answers" in result.stderr
    assert result.exit_code == 2


@pytest.mark.parametrize("exercise", catalog.EXERCISES, ids=lambda e: e.id)
def test_a_starter_as_it_is_is_not_implemented_yet(exercise: catalog.Exercise, tmp_path: Path) -> None:
    started = gpucloud("exercises", "start", exercise.id, tmp_path)
    assert started.exit_code == 0, started.output
    code, report = check(exercise.id, "--impl", tmp_path)
    assert set(outcomes(report).values()) == {"not implemented yet"}
    # Named as the catalog names them: a method as Class.method.
    assert {case["missing"] for case in report["cases"]} <= set(exercise.functions)
    assert code == 1


BASES = [e for e in catalog.EXERCISES if (e.folder / "wrong" / "_base.py").is_file()]


@pytest.mark.parametrize("exercise", BASES, ids=lambda e: e.id)
def test_the_answer_the_known_wrong_ones_change_passes(exercise: catalog.Exercise) -> None:
    # Each known-wrong answer changes one rule of it: the suite rejects them for that rule alone.
    code, report = check(exercise.id, "--impl", exercise.folder / "wrong" / "_base.py")
    assert set(outcomes(report).values()) == {"passed"}
    assert code == 0


def test_a_class_grows_one_method_at_a_time(tmp_path: Path) -> None:
    answer = tmp_path / "metrics_store.py"
    answer.write_text(
        "from exercises.metrics_store.wrong import _base\n"
        "from exercises.metrics_store.wrong._base import OutOfOrder, Result, Segment\n\n"
        "__all__ = ['MetricsStore', 'OutOfOrder', 'Result', 'Segment']\n\n\n"
        "class MetricsStore(_base.MetricsStore):\n"
        "    def query(self, series: str, start_ms: int, end_ms: int) -> Result:\n"
        "        raise NotImplementedError\n\n"
        "    def enforce_retention(self, now_ms: int) -> list[Segment]:\n"
        "        raise NotImplementedError\n"
    )
    _, report = check("metrics-store", "--impl", answer)
    written = {"MetricsStore.append", "MetricsStore.seal", "MetricsStore.segments"}
    by_case = {c["name"]: (c["outcome"], c.get("missing")) for c in report["cases"] if set(c["functions"]) <= written}
    assert by_case == {"test_seal_cuts_one_segment_per_window": ("passed", None)}
    missing = {c.get("missing") for c in report["cases"] if not set(c["functions"]) <= written}
    assert missing == {"MetricsStore.query", "MetricsStore.enforce_retention"}

"""``gpucloud exercises ...``: interview exercises run against the project's own code.

``list`` and ``show`` read the catalog; ``start`` writes a starter and the prompt; ``check`` runs
an exercise's suite, against the reference or a candidate's file, in a pytest process of its own:
the suites import the modules they run against (services, accounting, tsdb), which the CLI does
not load. docs/exercises.md describes each exercise.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from clients.cli import render
from clients.cli.context import EXIT_ERROR, EXIT_USAGE
from clients.cli.options import JsonFlag
from exercises import catalog

exercises = typer.Typer(help="Interview exercises against the project's own code.", no_args_is_help=True)

IdArg = Annotated[str, typer.Argument(help="The exercise's id (gpucloud exercises list).")]
PASSED, FAILED, NOT_YET = "passed", "failed", "not implemented yet"
_STYLES = {PASSED: "green", FAILED: "red", NOT_YET: "yellow"}


def _exercise(exercise_id: str) -> catalog.Exercise:
    try:
        return catalog.find(exercise_id)
    except catalog.UnknownExercise as unknown:
        render.fail(str(unknown))
        raise typer.Exit(EXIT_USAGE) from None


@exercises.command("list")
def exercises_list(json_out: JsonFlag = False) -> None:
    """Every exercise: id, title, difficulty, topic and the module it runs against; and those
    coming, when there are any."""
    if json_out:
        render.print_json(
            {
                "exercises": [
                    {
                        "id": e.id,
                        "title": e.title,
                        "difficulty": e.difficulty,
                        "topic": e.topic,
                        "question": e.question,
                        "reference": list(e.reference),
                    }
                    for e in catalog.EXERCISES
                ],
                "coming": [
                    {"id": c.id, "title": c.title, "question": c.question, "awaits": c.awaits} for c in catalog.COMING
                ],
            }
        )
        return
    columns = ["ID", "TITLE", "DIFFICULTY", "TOPIC", "REFERENCE"]
    render.console.print(
        render.table(
            "Exercises",
            columns,
            catalog.EXERCISES,
            lambda e: [e.id, e.title, e.difficulty, e.topic, ", ".join(e.reference)],
        )
    )
    if catalog.COMING:
        render.console.print(
            render.table("Coming", ["ID", "TITLE", "AWAITS"], catalog.COMING, lambda c: [c.id, c.title, c.awaits])
        )


@exercises.command("show")
def exercises_show(exercise_id: IdArg) -> None:
    """The exercise as an interviewer poses it: the question, the interface, follow-ups, the trap."""
    # Imported here: markdown-it costs every other `gpucloud` command 50 ms at start.
    from rich.markdown import Markdown

    render.console.print(Markdown(_exercise(exercise_id).prompt.read_text()))


@exercises.command("start")
def exercises_start(
    exercise_id: IdArg,
    directory: Annotated[Path, typer.Argument(help="Where to write the starter and the prompt (made if absent).")],
) -> None:
    """Write the starter (the signatures, each raising NotImplementedError) and the prompt into
    DIRECTORY; nothing of the answer."""
    exercise = _exercise(exercise_id)
    answer, prompt = directory / exercise.answer_file, directory / exercise.prompt.name
    taken = [str(path) for path in (answer, prompt) if path.exists()]
    if taken:
        render.fail(f"{', '.join(taken)} already exist(s): start into another directory, or remove them")
        raise typer.Exit(EXIT_ERROR)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        answer.write_text(exercise.starter.read_text())
        prompt.write_text(exercise.prompt.read_text())
    except OSError as error:
        render.fail(f"{directory}: {error.strerror or error}")
        raise typer.Exit(EXIT_ERROR) from None
    render.console.print(f"wrote {answer} and {prompt}")
    render.console.print(f"next: gpucloud exercises check {exercise.id} --impl {answer}", soft_wrap=True)


def _candidate(exercise: catalog.Exercise, impl: Path) -> Path:
    """The candidate's file: ``impl`` itself, or the starter's file name inside it when it is a
    directory. A path that is neither is a usage error: never a silent run of the reference."""
    path = impl / exercise.answer_file if impl.is_dir() else impl
    if not path.is_file():
        where = f"{impl} holds no {exercise.answer_file}" if impl.is_dir() else f"{impl}: no such file"
        render.fail(f"--impl {where}; nothing was run")
        raise typer.Exit(EXIT_USAGE)
    return path.resolve()


def _run_suite(exercise: catalog.Exercise, candidate: Path | None) -> dict[str, Any]:
    """The suite's report, run in a pytest process of its own."""
    root = catalog.HERE.parent
    with tempfile.TemporaryDirectory(prefix="gpucloud-exercise-") as scratch:
        report = Path(scratch) / "report.json"
        command = [
            sys.executable,
            "-m",
            "pytest",
            str(exercise.suite),
            "-q",
            "-p",
            "no:cacheprovider",
            f"--rootdir={root}",
            f"--exercise={exercise.id}",
            f"--exercise-report={report}",
        ]
        if candidate is not None:
            command.append(f"--impl={candidate}")
        finished = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
        if not report.exists():
            render.fail(f"the suite of {exercise.id} did not run:\n{(finished.stdout + finished.stderr)[-4000:]}")
            raise typer.Exit(EXIT_ERROR)
        document: dict[str, Any] = json.loads(report.read_text())
    cases = document["cases"]
    document["score"] = {
        "passed": sum(c["outcome"] == PASSED for c in cases),
        "failed": sum(c["outcome"] == FAILED for c in cases),
        "not_implemented": sum(c["outcome"] == NOT_YET for c in cases),
        "total": len(cases),
    }
    return document


def _show_report(document: dict[str, Any]) -> None:
    out = render.console
    under = "the reference" if document["reference"] else "your implementation"
    out.print(Text.assemble((document["exercise"], "bold"), f": {under}, ", (document["implementation"], "cyan")))
    if document["error"]:
        out.print(Text(document["error"], style="red"))
        return
    cases = document["cases"]
    out.print(
        render.table(
            "Cases",
            ["CASE", "FUNCTIONS", "OUTCOME"],
            cases,
            lambda c: [c["name"], ", ".join(c["functions"]), Text(_outcome(c), style=_STYLES[c["outcome"]])],
        )
    )
    for case in (c for c in cases if c["outcome"] == FAILED):
        out.print(Text.assemble(("FAILED ", "red bold"), (case["name"], "bold"), f": {case['checks']}"))
        shown = case["counterexample"] or case["detail"]
        out.print(Text(_indent(shown)))
        if case["counterexample"]:
            out.print(Text(_indent(case["detail"]), style="dim"))
        for hint in case["hints"] or ["no known mistake matches: read what the case checks, above"]:
            out.print(Text.assemble(("  hint: ", "yellow"), hint))
    score = document["score"]
    line = f"score: {score['passed']}/{score['total']} passed"
    if score["not_implemented"]:
        line += f", {score['not_implemented']} not implemented yet"
    out.print(Text(line, style="bold green" if score["passed"] == score["total"] else "bold"))


def _outcome(case: dict[str, Any]) -> str:
    if case["outcome"] == NOT_YET:
        return f"not implemented yet ({case['missing']})"
    return str(case["outcome"])


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def _passed(document: dict[str, Any]) -> bool:
    return not document["error"] and document["score"]["passed"] == document["score"]["total"]


@exercises.command("check")
def exercises_check(
    exercise_id: Annotated[
        str | None, typer.Argument(help="The exercise; left out: every one, on the reference.")
    ] = None,
    impl: Annotated[
        Path | None,
        typer.Option(help="Your file (or the directory `start` wrote); left out: the project's reference."),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Run an exercise's suite against your file or the reference, naming which; each failure
    with its shrunk counterexample and a hint, a score at the end. Exit 1 unless every case passed."""
    if exercise_id is None and impl is not None:
        render.fail("--impl needs the exercise it answers: gpucloud exercises check ID --impl PATH")
        raise typer.Exit(EXIT_USAGE)
    chosen = list(catalog.EXERCISES) if exercise_id is None else [_exercise(exercise_id)]
    candidate = None if impl is None else _candidate(chosen[0], impl)
    missing = [name for name in ("pytest", "hypothesis") if importlib.util.find_spec(name) is None]
    if missing:
        render.fail(f"the exercises need {' and '.join(missing)}, in the dev dependencies: run `uv sync`")
        raise typer.Exit(EXIT_ERROR)
    documents = [_run_suite(exercise, candidate) for exercise in chosen]
    if json_out:
        render.print_json(documents[0] if exercise_id is not None else {"exercises": documents})
    else:
        for document in documents:
            _show_report(document)
    if not all(_passed(d) for d in documents):
        raise typer.Exit(EXIT_ERROR)

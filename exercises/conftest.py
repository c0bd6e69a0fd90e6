"""Runs an exercise's suite against one implementation and writes what happened to a report.

``gpucloud exercises check`` starts pytest on a suite with ``--exercise ID``, ``--impl PATH``
(left out: the reference) and ``--exercise-report FILE``; the command renders the report. Each
case ends passed, failed (with hypothesis' shrunk counterexample and the hints of the known
mistakes the implementation shows), or "not implemented yet" (a function it needs is missing or
raises NotImplementedError): a starter grows one function at a time.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from exercises import catalog, harness

# The same inputs every run: a candidate sees the same counterexample again after each edit,
# and nothing is written into the repository (no example database).
settings.register_profile(
    "exercises", derandomize=True, database=None, deadline=None, report_multiple_bugs=False, max_examples=80
)
settings.load_profile("exercises")

PASSED, FAILED, NOT_YET = "passed", "failed", "not implemented yet"
_RESULTS = pytest.StashKey[dict[str, dict[str, Any]]]()
_ERROR = pytest.StashKey[str]()
_DETAIL_LINES = 12


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("exercises")
    group.addoption("--exercise", help="the exercise's id (exercises/catalog.py)")
    group.addoption("--impl", help="the candidate's file (absolute path); left out: the reference")
    group.addoption("--exercise-report", help="where to write the JSON report")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*functions): the functions of the implementation a case calls")
    config.stash[_RESULTS] = {}
    exercise_id = config.getoption("--exercise")
    if exercise_id is None:
        return
    exercise = catalog.find(exercise_id)
    impl_path = config.getoption("--impl")
    try:
        if impl_path is None:
            harness.choose(harness.load_reference(exercise.reference))
        else:
            harness.choose(harness.load_file(Path(impl_path)))
    except Exception as error:
        # Shown to the candidate as it is: their own file's SyntaxError or ImportError.
        where = impl_path or " + ".join(exercise.reference)
        config.stash[_ERROR] = f"{where} could not be imported:\n" + "".join(
            traceback.format_exception_only(type(error), error)
        )


def pytest_sessionstart(session: pytest.Session) -> None:
    if _ERROR in session.config.stash:
        _write(session.config)
        pytest.exit(session.config.stash[_ERROR], returncode=pytest.ExitCode.USAGE_ERROR)


def pytest_runtest_setup(item: pytest.Item) -> None:
    impl = harness.under_test()
    for name in _needed(item):
        if not impl.defines(name):
            raise harness.Missing(name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if call.when == "call" or (call.when == "setup" and call.excinfo is not None):
        item.config.stash[_RESULTS][item.nodeid] = _result(item, call)
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    try:
        harness.finish()
    finally:
        _write(session.config)


def _needed(item: pytest.Item) -> tuple[str, ...]:
    return tuple(name for mark in item.iter_markers("needs") for name in mark.args)


def _result(item: pytest.Item, call: pytest.CallInfo[None]) -> dict[str, Any]:
    function = getattr(item, "function", None)
    doc = (getattr(function, "__doc__", None) or "").strip().splitlines()
    result: dict[str, Any] = {
        "name": item.name,
        "checks": doc[0] if doc else item.name,
        "functions": list(_needed(item)),
        "outcome": PASSED,
    }
    excinfo = call.excinfo
    if excinfo is None:
        return result
    if isinstance(excinfo.value, harness.NotWritten):
        result.update(outcome=NOT_YET, missing=excinfo.value.name)
        return result
    if isinstance(excinfo.value, NotImplementedError):
        # From a method, which the implementation does not wrap as it does its functions.
        result.update(outcome=NOT_YET, missing=_unwritten(excinfo))
        return result
    impl = harness.under_test()
    mistakes: list[harness.Mistake] = getattr(getattr(item, "module", None), "MISTAKES", [])
    notes = getattr(excinfo.value, "__notes__", [])
    detail = excinfo.exconly().strip().splitlines()
    result.update(
        outcome=FAILED,
        counterexample="\n".join(n for n in notes if n.startswith(("Failing test case", "Falsifying example"))) or None,
        detail="\n".join(detail[:_DETAIL_LINES]),
        hints=[m.hint for m in mistakes if m.applies(impl, result["functions"])],
        mistakes=[m.key for m in mistakes if m.applies(impl, result["functions"])],
    )
    return result


def _unwritten(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    """The innermost function that raised NotImplementedError."""
    tb = excinfo.tb
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_qualname


def _write(config: pytest.Config) -> None:
    target = config.getoption("--exercise-report")
    if target is None:
        return
    impl_path = config.getoption("--impl")
    exercise_id = config.getoption("--exercise")
    document = {
        "exercise": exercise_id,
        "implementation": impl_path or " + ".join(catalog.find(exercise_id).reference),
        "reference": impl_path is None,
        "error": config.stash.get(_ERROR, None),
        "cases": list(config.stash[_RESULTS].values()),
    }
    Path(target).write_text(json.dumps(document, indent=2))

"""The one-way flow, checked on the source: which of our packages may import which, and that the
libraries are used only through what they export.

    agent/client -> API -> domain (services) -> store / tsdb / accounting

Every import is found, also the ones inside functions, so a lazy import does not slip past.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = frozenset({"accounting", "clients", "exercises", "gpucloud", "scheduling", "services", "tsdb"})
# The CLI modules that start a control plane in-process (`gpucloud serve`, `gpucloud demo`):
# the only ones in clients/ that may import services.
STARTS_SERVICES = frozenset({"clients/cli/app.py", "clients/cli/serve.py", "clients/cli/demo.py"})


def _our_imports(path: Path, own: str) -> set[str]:
    """The top-level packages of ours that ``path`` imports, other than ``own``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
    return (found & OURS) - {own}


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _allowed(path: Path) -> frozenset[str]:
    relative = path.relative_to(ROOT).as_posix()
    package = relative.partition("/")[0]
    if package in ("accounting", "tsdb", "scheduling"):
        return frozenset()  # libraries the services use: nothing of ours
    if package == "services":
        return frozenset({"gpucloud", "accounting", "tsdb", "scheduling"})
    if package == "exercises":
        # The suites run against the project's own modules, whichever room they are in.
        return OURS - {"exercises"}
    if relative.startswith("clients/cli/"):
        # The CLI also prices and exports offline with the accounting library.
        extra = {"services"} if relative in STARTS_SERVICES else set()
        if relative == "clients/cli/exercises.py":
            extra.add("exercises")  # the catalog only: the suites run in a pytest process of their own
        return frozenset({"gpucloud", "accounting", *extra})
    return frozenset({"gpucloud"})  # the Python client: the generated API only


@pytest.mark.parametrize("package", ["accounting", "tsdb", "scheduling", "services", "clients", "exercises"])
def test_package_imports_follow_the_one_way_flow(package: str) -> None:
    assert len(_modules(package)) > 3  # a wrong ROOT would find nothing and pass
    offending = {
        path.relative_to(ROOT).as_posix(): sorted(_our_imports(path, package) - _allowed(path))
        for path in _modules(package)
        if _our_imports(path, package) - _allowed(path)
    }
    assert offending == {}


def test_the_check_sees_lazy_and_dotted_imports(tmp_path: Path) -> None:
    # The rule is only as good as its parser: an import inside a function must count.
    module = tmp_path / "late.py"
    module.write_text(
        "import json\nimport tsdb.wal\n\n\ndef _late() -> None:\n"
        "    from services.server import ControlPlane\n    import clients.cli.app\n"
    )
    assert _our_imports(module, "tsdb") == {"services", "clients"}


LIBRARIES = ("accounting", "tsdb", "scheduling")


def _deep_imports(path: Path) -> set[str]:
    """The modules inside a library that ``path`` imports, rather than the library's own exports:
    ``from tsdb.wal import X``, ``import tsdb.wal``, and ``from tsdb import wal`` (a submodule)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.partition(".")[0] in LIBRARIES and "." in a.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            library = node.module.partition(".")[0]
            if library not in LIBRARIES:
                continue
            if "." in node.module:
                found.add(node.module)
            found.update(
                f"{library}.{a.name}"
                for a in node.names
                if (ROOT / library / f"{a.name}.py").exists() or (ROOT / library / a.name).is_dir()
            )
    return found


@pytest.mark.parametrize("package", ["services", "clients"])
def test_the_libraries_are_used_only_through_their_exports(package: str) -> None:
    """What services and clients need of tsdb and accounting is exported by their __init__, so a
    library may reorganise its modules without breaking its users."""
    deep = {
        path.relative_to(ROOT).as_posix(): sorted(_deep_imports(path))
        for path in _modules(package)
        if _deep_imports(path)
    }
    assert deep == {}


def test_the_check_sees_every_form_of_a_deep_import(tmp_path: Path) -> None:
    module = tmp_path / "deep.py"
    module.write_text(
        "import tsdb\nfrom tsdb import Store\nimport tsdb.wal\n\n\ndef _late() -> None:\n"
        "    from accounting.periods import parse_period\n    from accounting import rate_card\n"
    )
    assert _deep_imports(module) == {"tsdb.wal", "accounting.periods", "accounting.rate_card"}

"""The one-way flow of DESIGN.md, checked on the source: which of our packages may import which.

    agent/client -> API -> domain (services) -> store / tsdb / accounting

Every import is found, also the ones inside functions, so a lazy import does not slip past.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = frozenset({"accounting", "clients", "gpucloud", "services", "tsdb"})
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
    if package in ("accounting", "tsdb"):
        return frozenset()  # libraries the services use: nothing of ours
    if package == "services":
        return frozenset({"gpucloud", "accounting", "tsdb"})
    if relative.startswith("clients/cli/"):
        # The CLI also prices and exports offline with the accounting library.
        extra = {"services"} if relative in STARTS_SERVICES else set()
        return frozenset({"gpucloud", "accounting", *extra})
    return frozenset({"gpucloud"})  # the Python client: the generated API only


@pytest.mark.parametrize("package", ["accounting", "tsdb", "services", "clients"])
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

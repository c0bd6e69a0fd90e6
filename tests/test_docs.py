"""Docs that state facts about the code must match it."""

from __future__ import annotations

import dataclasses
import enum
import re
import subprocess
from pathlib import Path

import typer.main

from clients.cli.app import app
from services import limits
from services.nodes.transitions import TRANSITIONS
from services.server import ServerConfig

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_architecture_transition_table_matches_code() -> None:
    """docs/architecture.md lists exactly the node transitions the code allows."""
    text = (DOCS / "architecture.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)` \| (\w+) \| (\w+) \|$", text, flags=re.MULTILINE))
    in_code = {(event.value, state.value, target.value) for (event, state), target in TRANSITIONS.items()}
    assert rows == in_code


def test_api_guide_lists_exactly_the_error_reasons_in_the_code() -> None:
    """docs/api.md's error table names every ErrorInfo reason the services raise, and no other."""
    services = Path(__file__).resolve().parent.parent / "services"
    in_code = {
        reason
        for path in services.rglob("*.py")
        # reason="X" in a call, or reason: str = "X" as a default
        for reason in re.findall(r'reason(?:: str)? ?= ?"([A-Z][A-Z_]+)"', path.read_text())
    }
    in_code |= {f"{kind}_NOT_FOUND" for kind in ("TENANT", "NODE", "ALLOCATION", "OPERATION")}
    in_code |= {reason.value for reason in limits.Reason}
    table = [line for line in (DOCS / "api.md").read_text().splitlines() if line.startswith("| ")]
    documented = {reason for line in table for reason in re.findall(r"`([A-Z][A-Z_]+)`", line.split("|")[2])}
    assert documented == in_code


def _serve_defaults() -> dict[str, str | None]:
    """Each option of ``gpucloud serve`` and its default as the docs write it; None where the
    default is not a value (SQLite in the data directory, the built-in rate card, a policy per
    pool)."""
    command = typer.main.get_command(app)
    assert isinstance(command, typer.core.TyperGroup)
    # A field made by a factory (the placement policies) has no single value to state.
    config_defaults = {
        field.name: None if field.default is dataclasses.MISSING else field.default
        for field in dataclasses.fields(ServerConfig)
    }
    defaults: dict[str, str | None] = {}
    for param in command.commands["serve"].params:
        name = param.opts[0]
        if name == "--help":
            continue
        # A bound left unset keeps ServerConfig's default, which is what the docs state.
        value = param.default if param.default is not None else config_defaults.get(name[2:].replace("-", "_"))
        if isinstance(value, enum.Enum):
            value = value.value
        defaults[name] = None if value is None else str(value)
    return defaults


def test_operations_guide_lists_every_serve_option_with_its_default() -> None:
    """docs/operations.md's table of `gpucloud serve` options matches the command's options."""
    text = (DOCS / "operations.md").read_text()
    rows = re.findall(r"^\| `(--[a-z-]+)[^`]*` \| ([^|]+) \|", text, flags=re.MULTILINE)
    documented = {option: cell.strip().strip("`").replace(",", "") for option, cell in rows}
    in_code = _serve_defaults()
    assert documented.keys() == in_code.keys()
    stated = {option: documented[option] for option, default in in_code.items() if default is not None}
    assert stated == {option: default for option, default in in_code.items() if default is not None}


def _named_markdown(text: str) -> set[str]:
    """The Markdown files a text names by path (``docs/api.md``, ``billing.md``)."""
    return set(re.findall(r"(?<![\w./-])([\w./-]*\w\.md)\b", text))


def test_every_markdown_file_named_in_the_repository_exists() -> None:
    """A doc, docstring or comment that points at a Markdown file points at one the repository
    has: at that path from the root, beside the file that names it, or in docs/."""
    root = DOCS.parent
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    missing = []
    for name in tracked:
        path = root / name
        if name == "uv.lock" or name.startswith("proto/gpucloud/") or path.suffix not in {".py", ".md", ".toml", ""}:
            continue
        if not path.is_file():
            continue
        for target in _named_markdown(path.read_text(errors="replace")):
            if not any((base / target).is_file() for base in (root, path.parent, DOCS)):
                missing.append(f"{name}: {target}")
    assert missing == []


def test_named_markdown_finds_paths_and_bare_names() -> None:
    absent = "NOWHERE" + ".md"  # split, or this file would name a file that does not exist
    text = f"see {absent} and docs/api.md, or (billing.md)."
    assert _named_markdown(text) == {absent, "docs/api.md", "billing.md"}

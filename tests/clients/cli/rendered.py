"""What the CLI's renderers print, as text a test can read: a Rich renderable recorded on a
console of a fixed width, and a table line's words without its borders."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from clients.cli import render


def rendered(monkeypatch: pytest.MonkeyPatch, shown: Any, width: int = 160) -> str:
    """``shown`` printed on a recording console of ``width`` columns, which also replaces the
    CLI's own console for the test (captions printed beside it are recorded too)."""
    console = Console(width=width, record=True)
    monkeypatch.setattr(render, "console", console)
    console.print(shown)
    return console.export_text()


def words(line: str) -> list[str]:
    """The words of a table's line, without its borders."""
    return line.replace("│", " ").replace("┃", " ").split()

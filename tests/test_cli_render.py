"""How the command line's tables read on a narrow terminal."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from rich.console import Console

from clients import models
from clients.cli import render

NAME = "operations/op-01a232acff999e5ba067abcdef0123"


def show(monkeypatch: pytest.MonkeyPatch, width: int) -> str:
    """The operations table as a terminal ``width`` columns wide shows it."""
    console = Console(width=width, record=True)
    monkeypatch.setattr(render, "console", console)
    now = datetime(2026, 12, 1, tzinfo=UTC)
    operation = models.Operation(NAME, True, "alloc-01a232acff999e5ba067abcdef01", "CANCELLED", 2, 2, now, now)
    console.print(render.operations_table([operation]))
    return console.export_text()


@pytest.mark.parametrize("width", [120, 160])
def test_the_id_column_keeps_its_width_where_there_is_room(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    """The first column is what people paste into the next command (``operations wait NAME``):
    a terminal wide enough squeezes the other columns, not the id."""
    text = show(monkeypatch, width)
    assert NAME in text
    assert "CANCELLED" in text


@pytest.mark.parametrize("width", [80, 100])
def test_on_a_narrow_terminal_the_id_wraps_whole_and_the_rest_stays_readable(
    monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    text = show(monkeypatch, width)
    # Every character of the id is there, over several lines of its column.
    first_column = "".join(line.split("│")[1].strip() for line in text.splitlines() if line.count("│") > 2)
    assert NAME in first_column
    assert "…" not in first_column
    assert "CANCELLED" in text  # the other columns stay legible

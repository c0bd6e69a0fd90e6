"""How the command line's tables read on a narrow terminal."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from clients import models
from clients.cli import render

NAME = "operations/op-01a232acff999e5ba067abcdef0123"


def test_the_id_column_is_never_cut_on_a_narrow_terminal() -> None:
    """The first column is what people paste into the next command (``operations wait NAME``):
    a narrow terminal must squeeze the other columns, not end the id with an ellipsis."""
    now = datetime(2026, 12, 1, tzinfo=UTC)
    operation = models.Operation(NAME, True, "alloc-01a232acff999e5ba067abcdef01", "CANCELLED", 2, 2, now, now)
    for width in (100, 120):
        console = Console(width=width, record=True)
        console.print(render.operations_table([operation]))
        assert NAME in console.export_text(), width

"""How the command line's tables read on a narrow terminal."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import pytest
from rich.console import Console

from clients import models
from clients.cli import render
from clients.errors import InvalidArgumentError

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
def test_a_table_too_wide_for_the_terminal_becomes_one_record_per_row(
    monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """Seven columns with a 44-character id cannot share 80 or 100 columns without folding the
    id: each row is then printed as a record, a field per line, every value whole."""
    text = show(monkeypatch, width)
    lines = text.splitlines()
    assert any(NAME in line and "OPERATION" in line for line in lines)
    assert any("CANCELLED" in line and "STATE" in line for line in lines)
    assert "…" not in text
    assert max(len(line) for line in lines) <= width


def _node(node_id: str, *, allocation_id: str | None = None, cordoned: bool = False) -> models.Node:
    return models.Node(
        node_id=node_id,
        gpu_model="H100",
        zone="zone-a",
        rack="rack-a1",
        leaf_switch="leaf-a1",
        state="ALLOCATED" if allocation_id else "READY",
        cordoned=cordoned,
        status_reason="suspect NVLink" if cordoned else "",
        allocation_id=allocation_id,
        gpus=(),
        create_time=None,
        state_change_time=None,
    )


def _nodes_text(monkeypatch: pytest.MonkeyPatch, width: int, nodes: list[models.Node]) -> str:
    console = Console(width=width, record=True)
    monkeypatch.setattr(render, "console", console)
    console.print(render.nodes_table(nodes))
    return console.export_text()


def test_a_table_that_fits_keeps_every_row_on_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [_node(f"h100-a-{i:02d}", allocation_id=f"alloc-01a2338691453f647c5003f113f{i}") for i in range(3)]
    text = _nodes_text(monkeypatch, 160, nodes)
    rows = [line for line in text.splitlines() if "h100-a-" in line]
    assert len(rows) == 3
    assert all("ALLOCATED" in row and "alloc-01a2338691453f647c5003f113f" in row for row in rows)
    assert "not shown" not in text


def test_columns_empty_in_every_row_make_room_and_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh fleet on 80 columns: CORDONED, ALLOCATION and REASON hold nothing yet, so the table
    leaves them out, says so, and every node stays on one line."""
    text = _nodes_text(monkeypatch, 80, [_node(f"h100-a-{i:02d}") for i in range(3)])
    assert len([line for line in text.splitlines() if "h100-a-" in line and "READY" in line]) == 3
    assert "not shown, empty in every row: CORDONED, ALLOCATION, REASON" in text
    header = next(line for line in text.splitlines() if "NODE" in line)
    assert "ALLOCATION" not in header


def test_a_column_with_a_value_in_some_row_is_never_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [_node("h100-a-00"), _node("h100-a-01", cordoned=True)]
    text = _nodes_text(monkeypatch, 80, nodes)
    assert "suspect NVLink" in text
    assert "CORDONED" in text.replace("not shown, empty in every row: ", "")
    assert "…" not in text


def test_records_also_leave_out_columns_empty_in_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Allocated nodes on 100 columns are one record per row (the allocation id leaves no room
    for a table); CORDONED and REASON, empty in every row, are not a line of each record."""
    nodes = [_node(f"h100-a-{i:02d}", allocation_id=f"alloc-01a2338691453f647c5003f113f{i}") for i in range(2)]
    text = _nodes_text(monkeypatch, 100, nodes)
    lines = text.splitlines()
    assert any("ALLOCATION" in line and "alloc-01a2338691453f647c5003f113f1" in line for line in lines)
    fields = [line for line in lines if "not shown" not in line]
    assert not any("CORDONED" in line or "REASON" in line for line in fields)
    assert "not shown, empty in every row: CORDONED, REASON" in text


def test_times_and_lists_fold_at_their_spaces_before_ids_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 100 columns the allocations table fits once its times and node lists wrap at their
    spaces; the allocation id stays on one line."""
    console = Console(width=100, record=True)
    monkeypatch.setattr(render, "console", console)
    allocation_id = "alloc-01a2338691453f647c5003f113f5"
    now = datetime(2026, 12, 1, 21, 33, 6, tzinfo=UTC)
    allocation = models.Allocation(allocation_id, "acme", "H100", 2, "ACTIVE", ("h100-a-01", "h100-a-02"), now, None)
    console.print(render.allocations_table([allocation]))
    text = console.export_text()
    lines = text.splitlines()
    assert any(allocation_id in line and "2026-12-01" in line and "h100-a-01," in line for line in lines)
    assert any("21:33:06" in line and "h100-a-02" in line for line in lines)


@pytest.mark.parametrize("width", [160, 60])
def test_text_from_users_is_shown_as_written_never_as_markup(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    """An operator's cordon reason is data: rich markup and emoji codes in it stay as typed, in
    the table and in the one-record-per-row layout alike."""
    reason = ":fire: [red]hot[/red] [bold] \\"
    node = dataclasses.replace(_node("h100-a-00", cordoned=True), status_reason=reason)
    text = _nodes_text(monkeypatch, width, [node])
    assert reason in text


def test_error_lines_repeat_what_was_typed_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    errors = Console(width=200, record=True)
    monkeypatch.setattr(render, "errors", errors)
    render.fail("--start: '[x] :fire:' is not RFC 3339")
    failure = InvalidArgumentError(
        "bad", reason="INVALID_FIELD", field_violations={"node_id": "'[x]' must be 1-63 characters"}
    )
    render.error(failure, labels={"node_id": "NODE_ID"})
    text = errors.export_text()
    assert "error: --start: '[x] :fire:' is not RFC 3339" in text
    assert "  NODE_ID: '[x]' must be 1-63 characters" in text


def test_an_empty_listing_says_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """No rows at 80 columns: the title and "none", not headers folded into a sliver."""
    text = _nodes_text(monkeypatch, 80, [])
    assert [line.strip() for line in text.splitlines() if line.strip()] == ["Nodes", "none"]


def test_an_empty_listing_keeps_its_title_and_caption_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty table was only as wide as "none": rich folded a longer title to "Alloca / tions"
    and a query's stats caption over dozens of lines. Each keeps a line, wrapped at the terminal."""
    title = "power_w: samples, 2026-12-01 23:00:00 to 2026-12-02 00:00:00 UTC"
    caption = "0 series, 0 points; segments opened 0 of 0 (0 skipped by time), 0 bytes read, 0 samples decoded"
    for width, expected in ((120, [title, "none", caption]), (80, None)):
        console = Console(width=width, record=True)
        monkeypatch.setattr(render, "console", console)
        grid = render.table(title, ["NODE"], [], lambda row: [row])
        render.add_caption(grid, caption)
        console.print(grid)
        console.print(render.allocations_table([]))
        lines = [line.strip() for line in console.export_text().splitlines() if line.strip()]
        if expected is not None:
            assert lines == [*expected, "Allocations", "none"]
        else:
            # Too long for 80 columns: wrapped at the terminal's width, at spaces, not folded to "none"'s.
            assert len(lines) == 6
            assert lines[0] == title
            assert lines[-2:] == ["Allocations", "none"]
            assert " ".join(lines[2:4]) == caption
            assert all(len(line) <= width for line in lines)


def test_times_are_shown_in_utc_whatever_zone_they_carry() -> None:
    """Every time the command prints is read as UTC: one given with an offset is converted."""
    plus_one = timezone(timedelta(hours=1))
    assert render.when(datetime(2026, 12, 2, 0, 0, tzinfo=plus_one)) == "2026-12-01 23:00:00"
    assert render.when(datetime(2026, 12, 2, 0, 0, tzinfo=UTC)) == "2026-12-02 00:00:00"
    assert render.when(None) == "-"


def test_a_terminal_narrower_than_the_column_names_still_shows_every_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 12 columns a record's names and values both fold; the values used to shrink to nothing."""
    console = Console(width=12, record=True)
    monkeypatch.setattr(render, "console", console)
    tenant = models.Tenant("acme", "Acme Research", datetime(2026, 12, 1, tzinfo=UTC))
    console.print(render.tenants_table([tenant]))
    values = "".join(line.split("│")[2] for line in console.export_text().splitlines() if line.count("│") == 3)
    assert "".join(values.split()) == "acmeAcmeResearch2026-12-0100:00:00"

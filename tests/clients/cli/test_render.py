"""How the command line's tables read on a narrow terminal."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from rich.console import Console

from clients import models
from clients.cli import render
from clients.errors import InvalidArgumentError
from tests.clients.cli.rendered import words

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


CREATED = datetime(2026, 12, 1, 21, 33, 6, tzinfo=UTC)


def _allocation(allocation_id: str, state: str = "ACTIVE", **fields: Any) -> models.Allocation:
    nodes = ("h100-a-01",) if state == "ACTIVE" else ()
    made = models.Allocation(allocation_id, "acme", "H100", 1, state, nodes, CREATED, admit_time=CREATED)
    return dataclasses.replace(made, **fields)


def _allocations_text(monkeypatch: pytest.MonkeyPatch, items: list[models.Allocation], width: int = 200) -> str:
    console = Console(width=width, record=True)
    monkeypatch.setattr(render, "console", console)
    console.print(render.allocations_table(items))
    return console.export_text()


def _header(text: str) -> list[str]:
    return words(next(line for line in text.splitlines() if "ALLOCATION" in line))


def test_allocations_that_never_queued_show_no_queue_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """PRIORITY, QUEUE and ADMITTED would hold nothing telling: they are not there at all."""
    text = _allocations_text(monkeypatch, [_allocation("alloc-a"), _allocation("alloc-b", "CANCELLED")])
    assert _header(text) == ["ALLOCATION", "TENANT", "MODEL", "NODES", "STATE", "CREATED", "RELEASED", "NODE", "IDS"]
    assert "allocations explain" not in text


def test_a_pending_allocation_shows_its_place_in_the_queue_and_how_to_see_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pending = _allocation("alloc-p", "PENDING", queue_position=3, priority=500, admit_time=None)
    text = _allocations_text(monkeypatch, [pending, _allocation("alloc-a")])
    assert _header(text)[4:7] == ["PRIORITY", "STATE", "QUEUE"]
    [row] = [words(line) for line in text.splitlines() if "alloc-p" in line]
    assert row[4:7] == ["500", "PENDING", "3"]
    [active] = [words(line) for line in text.splitlines() if "alloc-a" in line]
    assert active[4:6] == ["0", "ACTIVE"]  # no queue position: it is not queued
    assert "why an allocation waits: gpucloud allocations explain ALLOCATION_ID" in text


def test_an_allocation_that_waited_shows_when_it_was_admitted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Billing runs from the admission: once an allocation waited, the table shows ADMITTED."""
    waited = _allocation("alloc-w", admit_time=CREATED + timedelta(minutes=7))
    text = _allocations_text(monkeypatch, [waited])
    assert "ADMITTED" in _header(text)
    assert "2026-12-01 21:40:06" in text


def test_the_allocations_table_still_fits_100_columns_with_a_queue_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pending allocation on 100 columns: its row and the queue position read whole, nothing cut."""
    pending = _allocation("alloc-01a2338691453f647c5003f113f5", "PENDING", queue_position=12, admit_time=None)
    text = _allocations_text(monkeypatch, [pending], width=100)
    assert "alloc-01a2338691453f647c5003f113f5" in text
    assert "PENDING" in text
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 100


def _explanation_text(monkeypatch: pytest.MonkeyPatch, explained: models.AllocationExplanation) -> str:
    console = Console(width=200, record=True)
    monkeypatch.setattr(render, "console", console)
    console.print(render.explanation(explained))
    return console.export_text()


def test_an_explanation_ranks_the_reasons_under_the_allocations_place_in_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pending = _allocation("alloc-p", "PENDING", queue_position=2, priority=10, node_count=4, admit_time=None)
    capacity = "waiting for capacity: 1 free H100 node(s), 4 needed whole; short by 3"
    behind = "behind 1 waiting allocation(s) in the H100 queue (position 2)"
    explained = models.AllocationExplanation(
        pending,
        (
            models.PendingReason("WAITING_FOR_CAPACITY", capacity, {"free": 1, "needed": 4}),
            models.PendingReason("BEHIND_GANGS", behind, {"ahead": 1}),
        ),
    )
    text = _explanation_text(monkeypatch, explained)
    assert "alloc-p: PENDING, position 2 in the H100 queue, priority 10, 4 node(s) asked whole" in text
    ranked = [words(line)[:2] for line in text.splitlines() if "_" in line and "│" in line]
    assert ranked == [["1", "WAITING_FOR_CAPACITY"], ["2", "BEHIND_GANGS"]]
    assert capacity in text
    assert behind in text


def test_an_explanation_of_an_allocation_that_does_not_wait_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _explanation_text(monkeypatch, models.AllocationExplanation(_allocation("alloc-a")))
    assert text.strip() == "alloc-a is not pending: it is ACTIVE, admitted 2026-12-01 21:33:06 UTC"


def test_json_carries_the_queue_fields_and_the_reasons_with_their_figures(capsys: pytest.CaptureFixture[str]) -> None:
    pending = _allocation("alloc-p", "PENDING", queue_position=2, priority=10, admit_time=None)
    reason = models.PendingReason("WAITING_FOR_CAPACITY", "short by 1", {"free": 1, "needed": 2})
    render.print_json(models.AllocationExplanation(pending, (reason,)))
    document = json.loads(capsys.readouterr().out)
    assert document["allocation"]["state"] == "PENDING"
    assert (document["allocation"]["priority"], document["allocation"]["queue_position"]) == (10, 2)
    assert document["allocation"]["admit_time"] is None
    assert document["reasons"] == [
        {"kind": "WAITING_FOR_CAPACITY", "message": "short by 1", "figures": {"free": 1, "needed": 2}}
    ]
    render.print_json(_allocation("alloc-a"))
    assert json.loads(capsys.readouterr().out)["admit_time"] == "2026-12-01T21:33:06Z"

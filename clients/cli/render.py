"""Output of the CLI: rich tables for people, ``--json`` for programs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, TypeVar

import grpc
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from clients import models
from clients.errors import GpucloudError

T = TypeVar("T")

console = Console()
errors = Console(stderr=True)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def print_json(value: Any) -> None:
    """One JSON document on stdout, no colour, so it pipes into jq."""
    print(json.dumps(_jsonable(value), indent=2))


def when(value: datetime | None) -> str:
    """``2026-11-03 14:05:00`` in the datetime's own zone (UTC for the client's), or "-" for None."""
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def money(value: Decimal | None, currency: str) -> str:
    """``USD 12.50``; an amount no rate priced reads "unpriced"."""
    return "[yellow]unpriced[/yellow]" if value is None else f"{currency} {value:f}"


# Room a column needs to stay readable beside the id column, and what each column costs in
# borders and padding.
_READABLE_COLUMN = 8
_COLUMN_FRAME = 3
# A cell this wide or narrower (a state, a model, a count, a zone) is never folded; a longer one
# that is not the id may fold at its spaces (times, lists, reasons) or, for a long word, within it.
_SHORT_CELL = 12
_LONG_WORD = 16


def table(title: str, columns: Sequence[str], rows: Sequence[T], cells: Callable[[T], Sequence[str]]) -> Table:
    """``rows`` as a table whose first column is the id people paste into the next command.

    Laid out for the terminal's width, in this order of preference: every cell on one line;
    long cells (times, lists, reasons) folded at their spaces while ids and short cells stay
    whole; the same without the columns that hold nothing in any row (the caption names them);
    and, when even that does not fit, one record per row, a field per line, as psql's expanded
    display does. No cell is ever cut short.
    """
    lines = [[cell for cell in cells(row)] for row in rows]
    natural = [
        max([len(name)] + [cell_len(Text.from_markup(line[index]).plain) for line in lines])
        for index, name in enumerate(columns)
    ]
    floors = [
        _floor(index, name, width, lines) for index, (name, width) in enumerate(zip(columns, natural, strict=True))
    ]
    kept = list(range(len(columns)))
    if not _fits([floors[i] for i in kept]):
        kept = [i for i in kept if i == 0 or any(line[i] not in ("", "-") for line in lines)]
        if not _fits([floors[i] for i in kept]):
            return _records(title, columns, lines)
    grid = Table(title=title, title_justify="left", header_style="bold")
    folds = not _fits([natural[i] for i in kept])
    for i in kept:
        if folds and floors[i] < natural[i]:
            grid.add_column(columns[i], overflow="fold", min_width=floors[i])
        else:
            grid.add_column(columns[i], no_wrap=True, min_width=natural[i])
    for line in lines:
        grid.add_row(*(line[i] for i in kept))
    left_out = [columns[i] for i in range(len(columns)) if i not in kept]
    if left_out:
        grid.caption = f"not shown, empty in every row: {', '.join(left_out)}"
        grid.caption_justify = "left"
    return grid


def _floor(index: int, name: str, natural: int, lines: Sequence[Sequence[str]]) -> int:
    """The narrowest a column may become: the id and short cells keep their width, others their longest word."""
    if index == 0 or natural <= _SHORT_CELL:
        return natural
    words = [cell_len(word) for line in lines for word in Text.from_markup(line[index]).plain.split()]
    return max(len(name), min(max(words, default=0), _LONG_WORD))


def _fits(widths: Sequence[int]) -> bool:
    return sum(widths) + _COLUMN_FRAME * len(widths) + 1 <= console.width


def _records(title: str, columns: Sequence[str], lines: Sequence[Sequence[str]]) -> Table:
    """Each row as a block of ``COLUMN value`` lines, blocks separated by a rule."""
    # As wide as the terminal, so that the title and a caption are not folded to the records' width.
    grid = Table(title=title, title_justify="left", show_header=False, expand=True)
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold", ratio=1)
    for line in lines:
        for position, (name, cell) in enumerate(zip(columns, line, strict=True)):
            grid.add_row(name, cell, end_section=position == len(columns) - 1)
    return grid


def add_columns(
    grid: Table,
    columns: Sequence[str],
    lines: Sequence[Sequence[str]],
    *,
    whole: Collection[str],
    right: Collection[str] = (),
) -> None:
    """Add ``columns`` to ``grid`` for the rows ``lines``. The ``whole`` ones (ids people paste,
    numbers) keep their full width on one line when the terminal leaves every other column room
    to be read, and otherwise wrap; no cell is ever cut short with an ellipsis."""
    widths = {
        name: max([cell_len(Text.from_markup(line[index]).plain) for line in lines] + [len(name)])
        for index, name in enumerate(columns)
        if name in whole
    }
    needed = sum(widths.values()) + _COLUMN_FRAME * len(columns) + 1 + _READABLE_COLUMN * (len(columns) - len(widths))
    fits = needed <= console.width
    for name in columns:
        justify: Literal["left", "right"] = "right" if name in right else "left"
        if fits and name in widths:
            grid.add_column(name, justify=justify, no_wrap=True, min_width=widths[name])
        else:
            grid.add_column(name, justify=justify, overflow="fold")


def tenants_table(items: Sequence[models.Tenant], title: str = "Tenants") -> Table:
    """Tenants: id, display name, creation time."""
    return table(
        title, ["TENANT", "NAME", "CREATED"], items, lambda t: [t.tenant_id, t.display_name, when(t.create_time)]
    )


_STATE_STYLE = {
    "READY": "green",
    "ALLOCATED": "cyan",
    "ACTIVE": "cyan",
    "SCRUBBING": "yellow",
    "CANCELLING": "yellow",
    "BURN_IN": "yellow",
    "DRAINING": "magenta",
    "QUARANTINED": "red",
    "REPAIR": "red",
    "RETIRED": "dim",
    "CANCELLED": "dim",
}


def styled(state: str) -> str:
    """``state`` in rich markup, coloured by what it means (READY green, QUARANTINED red...); unknown ones plain."""
    style = _STATE_STYLE.get(state)
    return f"[{style}]{state}[/{style}]" if style else state


def nodes_table(items: Sequence[models.Node], title: str = "Nodes") -> Table:
    """Nodes: inventory, location, state, cordon, the allocation holding each, and the status reason."""
    return table(
        title,
        ["NODE", "MODEL", "GPUS", "ZONE", "RACK", "LEAF", "STATE", "CORDONED", "ALLOCATION", "REASON"],
        items,
        lambda n: [
            n.node_id,
            n.gpu_model,
            str(len(n.gpus)),
            n.zone,
            n.rack,
            n.leaf_switch,
            styled(n.state),
            "yes" if n.cordoned else "",
            n.allocation_id or "",
            n.status_reason,
        ],
    )


def node_events_table(items: Sequence[models.NodeEvent], title: str) -> Table:
    """A node's state changes: time, event, from and to state, actor, reason."""
    return table(
        title,
        ["TIME", "EVENT", "FROM", "TO", "ACTOR", "REASON"],
        items,
        lambda e: [when(e.time), e.event, e.from_state, styled(e.to_state), e.actor, e.reason],
    )


def allocations_table(items: Sequence[models.Allocation], title: str = "Allocations") -> Table:
    """Allocations: tenant, model, node count, state, creation and release times, node ids."""
    return table(
        title,
        ["ALLOCATION", "TENANT", "MODEL", "NODES", "STATE", "CREATED", "RELEASED", "NODE IDS"],
        items,
        lambda a: [
            a.allocation_id,
            a.tenant_id,
            a.gpu_model,
            str(a.node_count),
            styled(a.state),
            when(a.create_time),
            when(a.release_time),
            ", ".join(a.node_ids),
        ],
    )


def operations_table(items: Sequence[models.Operation], title: str = "Operations") -> Table:
    """Cancel operations: done or not, the allocation and its state, nodes released of all, and their times."""
    return table(
        title,
        ["OPERATION", "DONE", "ALLOCATION", "STATE", "RELEASED", "REQUESTED", "RELEASED AT"],
        items,
        lambda o: [
            o.name,
            "yes" if o.done else "no",
            o.allocation_id,
            styled(o.state),
            f"{o.nodes_released}/{o.nodes_total}",
            when(o.request_time),
            when(o.release_time),
        ],
    )


def error(err: GpucloudError, *, address: str | None = None, labels: Mapping[str, str] | None = None) -> None:
    """An API error as a person should read it: code, reason, then each bad field or the message.

    ``labels`` names, for a field path, the command-line option that set it: the field is then
    shown as ``--nodes (node_count)``."""
    reason = f" [bold]{err.reason}[/bold]" if err.reason else ""
    if not err.field_violations:
        errors.print(f"[red]error[/red] {err.code.name}{reason}: {err.message}", highlight=False)
        if err.code is grpc.StatusCode.UNAVAILABLE and not err.reason and address is not None:
            # No ErrorInfo: the transport failed, not the server.
            errors.print(f"  is a control plane serving at {address}? (--addr or GPUCLOUD_ADDR)", highlight=False)
        return
    # The message repeats the violations: list them once, one per line.
    errors.print(f"[red]error[/red] {err.code.name}{reason}:", highlight=False)
    labels = labels or {}
    for field, description in err.field_violations.items():
        label = labels.get(field, field)
        # "--zone", not "--zone (zone)"; "--nodes (node_count)" keeps the API's name.
        shown = label if label.strip("-").replace("-", "_").lower() == field else f"{label} ({field})"
        errors.print(f"  [yellow]{shown}[/yellow]: {description}", highlight=False)
    total = err.metadata.get("violations")
    if total is not None:
        errors.print(f"  (the first {len(err.field_violations)} of {total} bad fields)", highlight=False)

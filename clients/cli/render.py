"""Output of the CLI: rich tables for people, ``--json`` for programs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal, TypeVar

import grpc
from rich.cells import cell_len
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from clients import metrics as m
from clients import models
from clients.cli.fleet_watch import FleetSummary, StateChange
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


def show_page(page: models.Page[T], json_out: bool, as_table: Table) -> None:
    """Print one page of a listing: as JSON (items and the next page token), or as the table
    with a line naming the --page-token of the next page."""
    if json_out:
        print_json({"items": page.items, "next_page_token": page.next_page_token})
        return
    console.print(as_table)
    if page.next_page_token:
        # Unwrapped, however narrow the terminal: a token folded over lines cannot be pasted back.
        console.print(f"[dim]more: --page-token {page.next_page_token}[/dim]", soft_wrap=True)


def show_one(item: object, json_out: bool, as_table: Table) -> None:
    """Print one resource: as JSON, or as the table that shows it."""
    if json_out:
        print_json(item)
    else:
        console.print(as_table)


def when(value: datetime | None) -> str:
    """``2026-11-03 14:05:00`` in UTC, or "-" for None. An aware datetime in another zone is
    converted first (every time the CLI shows is read as UTC); a naive one is shown as it is."""
    if value is None:
        return "-"
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S")


def money(value: Decimal | None, currency: str) -> str:
    """``USD 12.50``; an amount no rate priced reads "unpriced"."""
    return "[yellow]unpriced[/yellow]" if value is None else f"{currency} {value:f}"


# What an anomalies table shows in place of rows that --max-anomalies left out.
ANOMALIES_NOT_SHOWN = "not shown: raise --max-anomalies or use --json"

# What each column costs in borders and padding.
_COLUMN_FRAME = 3
# A cell this wide or narrower (a state, a model, a count, a zone) is never folded.
_SHORT_CELL = 12

Cell = str | Text
"""A table cell: a ``str`` is shown exactly as written (never read as markup: it may hold a
tenant's or an operator's text); a ``Text`` carries its own style."""


def table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[T],
    cells: Callable[[T], Sequence[Cell]],
    *,
    right: Collection[str] = (),
    empty: str = "none",
) -> Table:
    """``rows`` as a table whose first column is the id people paste into the next command.

    Laid out for the terminal's width, in this order of preference: every cell on one line;
    cells of several words (times, lists, reasons) folded at their spaces while every word,
    and so every id, stays whole; the same without the columns that hold nothing in any row
    (the caption names them); and, when even that does not fit, one record per row, a field per
    line, as psql's expanded display does. No cell is ever cut short or split inside a word.
    ``right`` names the columns aligned right (numbers); ``empty`` is what stands for no rows.
    """
    lines = [[cell if isinstance(cell, Text) else Text(cell) for cell in cells(row)] for row in rows]
    if not lines:
        return _nothing(title, empty)
    natural = [max([len(name)] + [cell_len(line[index].plain) for line in lines]) for index, name in enumerate(columns)]
    floors = [
        natural[index] if natural[index] <= _SHORT_CELL else _longest_word(name, [line[index] for line in lines])
        for index, name in enumerate(columns)
    ]
    kept = list(range(len(columns)))
    if not _fits([floors[i] for i in kept]):
        kept = [i for i in kept if i == 0 or any(line[i].plain not in ("", "-") for line in lines)]
        if not _fits([floors[i] for i in kept]):
            grid = _records(title, [columns[i] for i in kept], [[line[i] for i in kept] for line in lines])
            _name_left_out(grid, columns, kept)
            return grid
    grid = Table(title=title, title_justify="left", header_style="bold")
    folds = not _fits([natural[i] for i in kept])
    for i in kept:
        justify: Literal["left", "right"] = "right" if columns[i] in right else "left"
        if folds and floors[i] < natural[i]:
            grid.add_column(columns[i], justify=justify, overflow="fold", min_width=floors[i])
        else:
            grid.add_column(columns[i], justify=justify, no_wrap=True, min_width=natural[i])
    for line in lines:
        grid.add_row(*(line[i] for i in kept))
    _name_left_out(grid, columns, kept)
    return grid


def _name_left_out(grid: Table, columns: Sequence[str], kept: Sequence[int]) -> None:
    """Say under the table which columns were left out for holding nothing in any row."""
    left_out = [columns[i] for i in range(len(columns)) if i not in kept]
    if left_out:
        add_caption(grid, f"not shown, empty in every row: {', '.join(left_out)}")


def add_caption(grid: Table, line: str) -> None:
    """Add a line under the table, after any the layout put there."""
    grid.caption = line if not grid.caption else f"{grid.caption}\n{line}"
    grid.caption_justify = "left"


def _longest_word(name: str, cells: Sequence[Text]) -> int:
    """The narrowest a column of several-word cells may become: its header or its longest word."""
    return max([len(name)] + [cell_len(word) for cell in cells for word in cell.plain.split()])


def _fits(widths: Sequence[int]) -> bool:
    return sum(widths) + _COLUMN_FRAME * len(widths) + 1 <= console.width


def _nothing(title: str, text: str = "none") -> Table:
    """An empty listing: its title, and that there is nothing (``text``), rather than a row of headers."""
    # As wide as the terminal: a table is only as wide as its cells, and rich folds the title
    # and any caption (a query's stats line) to that width, here the four letters of "none".
    grid = Table(title=title, title_justify="left", show_header=False, box=None, expand=True, pad_edge=False)
    grid.add_column(style="dim")
    grid.add_row(text)
    return grid


def _records(title: str, columns: Sequence[str], lines: Sequence[Sequence[Text]]) -> Table:
    """Each row as a block of ``COLUMN value`` lines, blocks separated by a rule."""
    # As wide as the terminal, so that the title and a caption are not folded to the records' width.
    grid = Table(title=title, title_justify="left", show_header=False, expand=True)
    # Both fold: on a terminal too narrow for the longest column name, the names give way
    # rather than the values (rich would shrink the value column to nothing).
    grid.add_column(style="bold", overflow="fold")
    grid.add_column(overflow="fold", ratio=1)
    for line in lines:
        for position, (name, cell) in enumerate(zip(columns, line, strict=True)):
            grid.add_row(name, cell, end_section=position == len(columns) - 1)
    return grid


def tenants_table(items: Sequence[models.Tenant], title: str = "Tenants") -> Table:
    """Tenants: id, display name, creation time."""
    return table(
        title, ["TENANT", "NAME", "CREATED"], items, lambda t: [t.tenant_id, t.display_name, when(t.create_time)]
    )


_STATE_STYLE = {
    "PENDING": "blue",
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


def styled(state: str) -> Text:
    """``state`` coloured by what it means (READY green, QUARANTINED red...); unknown ones plain."""
    return Text(state, style=_STATE_STYLE.get(state, ""))


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


def health_events_table(items: Sequence[models.NodeEvent], title: str) -> Table:
    """The health controller's decisions across the fleet: time, node, event, states, reason."""
    return table(
        title,
        ["TIME", "NODE", "EVENT", "FROM", "TO", "REASON"],
        items,
        lambda e: [when(e.time), e.node_id, e.event, e.from_state, styled(e.to_state), e.reason],
    )


def health_automation_table(items: Sequence[models.HealthAutomation], title: str) -> Table:
    """Pools and whether the health controller may remove their nodes: model, state, since, by whom, why."""
    return table(
        title,
        ["MODEL", "AUTOMATION", "SINCE", "BY", "REASON"],
        items,
        lambda p: [p.gpu_model, "paused" if p.paused else "on", when(p.updated), p.actor or "-", p.reason],
    )


def spare_pools_table(items: Sequence[models.SparePool], title: str) -> Table:
    """Pools and their spares: model, spares held back, free nodes, who set it and when."""
    return table(
        title,
        ["MODEL", "SPARES", "FREE", "SET", "BY"],
        items,
        lambda p: [p.gpu_model, str(p.spares), str(p.free_nodes), when(p.updated), p.actor or "-"],
        right=("SPARES", "FREE"),
    )


def quotas_table(items: Sequence[models.Quota], title: str = "Quotas") -> Table:
    """Quotas: tenant, model, its own quota, what it may borrow, its cohort, and the nodes it
    holds with the GPUs they make (part-node work counts its GPUs, so 2.5 GPUs are one node
    used); a tenant holding more than its quota is borrowing, which the caption explains."""
    borrowing = any(q.used_nodes > q.nodes for q in items)
    grid = table(
        title,
        ["TENANT", "MODEL", "QUOTA", "BORROW LIMIT", "COHORT", "USED", "USED GPUS"],
        items,
        lambda q: [
            q.tenant_id,
            q.gpu_model,
            str(q.nodes),
            str(q.borrow_limit),
            q.cohort or "-",
            Text(str(q.used_nodes), style="yellow") if q.used_nodes > q.nodes else str(q.used_nodes),
            f"{q.used_gpu_milli / 1000:g}",
        ],
        right=("QUOTA", "BORROW LIMIT", "USED", "USED GPUS"),
        empty="none: a tenant without a quota of a model is not limited",
    )
    if borrowing:
        # Why a count stands out: those are the allocations a lender's reclaim preempts.
        add_caption(
            grid,
            "USED over QUOTA: borrowing from its cohort; the borrowers' allocations are preempted"
            " when a tenant of the cohort reclaims its own quota",
        )
    return grid


def isolation_table(items: Sequence[models.IsolationViolation], title: str) -> Table:
    """Isolation violations: node, kind, state, holder, partitions reported, what is wrong."""
    return table(
        title,
        ["NODE", "VIOLATION", "STATE", "HELD BY", "PARTITIONS", "WHAT"],
        items,
        lambda v: [
            v.node_id,
            v.kind,
            styled(v.state),
            v.tenant_id or "-",
            ", ".join(str(key) for key in v.reported_partition_keys),
            v.message,
        ],
    )


def fragmentation_table(items: Sequence[models.PoolFragmentation], title: str = "Fragmentation") -> Table:
    """Pools and their free capacity: model, nodes in service, free nodes, the nodes shared by
    part-node allocations (only when some pool has one), whole GPUs free (on both), the largest
    free block (the most free nodes under one leaf switch) and the GPUs stranded on READY nodes
    cordoned or unreachable."""
    shared = any(p.shared_nodes for p in items)
    grid = table(
        title,
        [
            "MODEL",
            "NODES",
            "FREE NODES",
            *["SHARED NODES"] * shared,
            "FREE GPUS",
            "LARGEST FREE BLOCK",
            "STRANDED GPUS",
        ],
        items,
        lambda p: [
            p.gpu_model,
            str(p.nodes),
            str(p.free_nodes),
            *[str(p.shared_nodes)] * shared,
            str(p.free_gpus),
            str(p.largest_free_block),
            Text(str(p.stranded_gpus), style="yellow") if p.stranded_gpus else "0",
        ],
        right=("NODES", "FREE NODES", "SHARED NODES", "FREE GPUS", "LARGEST FREE BLOCK", "STRANDED GPUS"),
        empty="none: no nodes in service",
    )
    if any(p.free_nodes > p.largest_free_block for p in items):
        # Why the two differ: a same-block gang needs its nodes under one switch.
        add_caption(
            grid,
            "LARGEST FREE BLOCK under FREE NODES: the free nodes are spread over leaf switches;"
            " gpucloud fleet defrag --plan proposes the moves that would free a whole one, --apply makes them",
        )
    return grid


CapacityKind = Literal["free", "held", "shared", "stranded", "other"]
"""What a node's capacity is to placement (``capacity_kind``)."""


def capacity_kind(node: models.NodeCapacity) -> CapacityKind:
    """What a node's capacity is to placement: free (READY and placeable), held by an allocation,
    shared by part-node allocations, stranded (READY but cordoned or unreachable) or other
    (burning in, scrubbing, out of service)."""
    if node.stranded:
        return "stranded"
    if node.allocation_id:
        return "held"
    if node.shared:
        return "shared"
    return "free" if node.free_gpus > 0 else "other"


def by_leaf_switch(pool: models.PoolFragmentation) -> dict[str, list[models.NodeCapacity]]:
    """A pool's nodes per leaf switch, both in the server's fabric order."""
    switches: dict[str, list[models.NodeCapacity]] = {}
    for node in pool.node_capacity:
        switches.setdefault(node.leaf_switch, []).append(node)
    return switches


def leaf_switches_table(pool: models.PoolFragmentation) -> Table:
    """A pool's leaf switches in fabric order: nodes in service under each, how many are free,
    and how many held by allocations."""
    rows = list(by_leaf_switch(pool).items())
    return table(
        f"{pool.gpu_model}: by leaf switch",
        ["LEAF SWITCH", "NODES", "FREE", "HELD"],
        rows,
        lambda row: [
            row[0] or "-",
            str(len(row[1])),
            str(sum(capacity_kind(n) == "free" for n in row[1])),
            str(sum(capacity_kind(n) == "held" for n in row[1])),
        ],
        right=("NODES", "FREE", "HELD"),
    )


def defrag_moves_table(items: Sequence[models.DefragmentationMove], title: str = "Moves") -> Table:
    """A defragmentation plan's moves: the allocation, its tenant, the node it leaves and the one it goes to."""
    return table(
        title,
        ["ALLOCATION", "TENANT", "FROM", "TO"],
        items,
        lambda mv: [mv.allocation_id, mv.tenant_id, mv.from_node_id, mv.to_node_id],
        empty="none",
    )


def defrag_costs_table(items: Sequence[models.DefragmentationCost], title: str = "Costs") -> Table:
    """What a defragmentation plan costs each allocation it touches: its nodes moved, of its node count."""
    return table(
        title,
        ["ALLOCATION", "TENANT", "NODES MOVED", "NODE COUNT"],
        items,
        lambda c: [c.allocation_id, c.tenant_id, str(c.nodes_moved), str(c.node_count)],
        right=("NODES MOVED", "NODE COUNT"),
        empty="none",
    )


def peer_groups_table(items: Sequence[m.PeerGroup], title: str) -> Table:
    """Peer groups of an outlier listing: model, load class, GPUs, median and spread."""
    return table(
        title,
        ["MODEL", "LOAD", "GPUS", "MEDIAN", "SPREAD"],
        items,
        lambda g: [g.gpu_model, "busy" if g.busy else "idle", str(g.gpus), f"{g.median:.4g}", f"{g.spread:.3g}"],
    )


def outliers_table(items: Sequence[m.GpuOutlier], title: str) -> Table:
    """GPUs far below their peers: node, GPU, model, load class, value, median, spreads below."""
    return table(
        title,
        ["NODE", "GPU", "MODEL", "LOAD", "VALUE", "MEDIAN", "BELOW"],
        items,
        lambda o: [
            o.node_id,
            str(o.gpu_index),
            o.gpu_model,
            "busy" if o.busy else "idle",
            f"{o.value:.4g}",
            f"{o.median:.4g}",
            f"{o.deviations:.1f} spreads",
        ],
    )


# In the order shown; PART, PRIORITY, QUEUE and ADMITTED only where a row needs them (allocations_table).
_ALLOCATION_COLUMNS = (
    "ALLOCATION", "TENANT", "MODEL", "NODES", "PART", "PRIORITY", "STATE", "QUEUE",
    "CREATED", "ADMITTED", "RELEASED", "NODE IDS",
)  # fmt: skip


def allocations_table(items: Sequence[models.Allocation], title: str = "Allocations") -> Table:
    """Allocations: tenant, model, node count, state, creation and release times, node ids; with
    PART (what a part-node allocation asks of its one node: ``part_asked``) where some asks for part
    of a node, PRIORITY where some allocation has one, QUEUE (the position of each PENDING one in
    its model's queue) where some waits, and ADMITTED where some waited before it was placed. Under
    the table: the nodes replaced under them, why any is degraded, why any was preempted (its STATE
    is marked too), and how to see why one waits."""
    # Columns that would hold nothing telling in most listings are there only when a row needs them.
    optional: list[tuple[str, bool, Callable[[models.Allocation], Cell]]] = [
        ("PART", any(a.part_node for a in items), part_asked),
        ("PRIORITY", any(a.priority for a in items), lambda a: str(a.priority)),
        ("QUEUE", any(a.state == "PENDING" for a in items), _queue_cell),
        ("ADMITTED", any(_waited(a) for a in items), lambda a: when(a.admit_time)),
    ]
    shown = {name: cell for name, wanted, cell in optional if wanted}
    left_out = {name for name, wanted, _ in optional if not wanted}
    columns = [name for name in _ALLOCATION_COLUMNS if name not in left_out]

    def cells(a: models.Allocation) -> list[Cell]:
        fixed: dict[str, Cell] = {
            "ALLOCATION": a.allocation_id,
            "TENANT": a.tenant_id,
            "MODEL": a.gpu_model,
            # A part-node allocation asks for no whole nodes (node_count 0): PART says what.
            "NODES": "-" if a.part_node else str(a.node_count),
            "STATE": _state_cell(a),
            "CREATED": when(a.create_time),
            "RELEASED": when(a.release_time),
            "NODE IDS": ", ".join(a.node_ids),
        }
        return [fixed[name] if name in fixed else shown[name](a) for name in columns]

    grid = table(title, columns, items, cells, right=("NODES", "PRIORITY", "QUEUE"))
    notes = [
        f"{a.allocation_id}: {made.removed_node_id} -> {made.spare_node_id or 'no spare yet'} at {when(made.time)}"
        + (f", the spare from {when(made.spare_time)}" if made.spare_time not in (None, made.time) else "")
        + f" ({made.reason})"
        for a in items
        for made in a.replacements
    ] + [f"{a.allocation_id}: {a.degraded_reason}" for a in items if a.degraded_reason]
    # The server's sentence begins "preempted: ...", as a degraded reason says what is missing.
    notes += [f"{a.allocation_id}: {a.preempted_reason}" for a in items if a.preempted_reason]
    if "QUEUE" in shown:
        notes.append("why an allocation waits: gpucloud allocations explain ALLOCATION_ID")
    for note in notes:
        add_caption(grid, note)
    return grid


def part_asked(allocation: models.Allocation) -> str:
    """What a part-node allocation asks of its one node: "2 GPUs", "MIG 3g.40gb", "share
    250/1000", each with "CPU 4" and "16384 MiB" where asked, or "CPU 4, 16384 MiB" alone;
    "-" for one of whole nodes."""
    a = allocation
    asked = []
    if a.gpus:
        asked.append(f"{a.gpus} GPU" + ("s" if a.gpus != 1 else ""))
    elif a.mig_profile:
        asked.append(f"MIG {a.mig_profile}")
    elif a.share_milli:
        asked.append(f"share {a.share_milli}/1000")
    if a.cpu_milli:
        asked.append(f"CPU {a.cpu_milli / 1000:g}")
    if a.memory_mib:
        asked.append(f"{a.memory_mib} MiB")
    return ", ".join(asked) or "-"


def gpu_holds_table(allocation: models.Allocation, title: str = "GPU holds") -> Table:
    """What a part-node allocation holds on its node, a GPU per row: the node, the GPU's index and
    UUID ("-" for CPU and memory alone), how much of it (``held``) and, where some hold is a MIG
    slice, its first memory slice (MIG START)."""
    mig = any(hold.mig_start >= 0 for hold in allocation.gpu_holds)
    columns = ["NODE", "GPU", "UUID", "HELD", *(["MIG START"] if mig else [])]

    def cells(hold: models.GpuHold) -> list[Cell]:
        gpu = [str(hold.gpu_index), hold.gpu_uuid or "-"] if hold.gpu_index >= 0 else ["-", "-"]
        start = [str(hold.mig_start) if hold.mig_start >= 0 else "-"] if mig else []
        return [hold.node_id, *gpu, held(hold), *start]

    return table(title, columns, allocation.gpu_holds, cells, right=("GPU", "MIG START"))


def held(hold: models.GpuHold) -> str:
    """How much of its GPU a hold has: "whole GPU", "500/1000" of it, or "CPU and memory" (no GPU)."""
    if hold.gpu_index < 0:
        return "CPU and memory"
    return "whole GPU" if hold.milli == 1000 else f"{hold.milli}/1000"


def allocation_detail(allocation: models.Allocation, title: str = "Allocation") -> Table | Group:
    """One allocation: its row (``allocations_table``), and for a part-node one what it holds
    on its node (``gpu_holds_table``) once it holds anything."""
    row = allocations_table([allocation], title)
    if not allocation.gpu_holds:
        return row
    return Group(row, gpu_holds_table(allocation))


def _state_cell(allocation: models.Allocation) -> Text:
    """An allocation's state, marked when it is degraded or was preempted (the caption says why)."""
    cell = styled(allocation.state)
    if allocation.degraded_reason:
        cell += Text(" (degraded)", style="red")
    if allocation.preempted_reason:
        cell += Text(" (preempted)", style="magenta")
    return cell


def _queue_cell(allocation: models.Allocation) -> Cell:
    """A PENDING allocation's place in its model's queue (1 for the head); nothing for any other."""
    return str(allocation.queue_position) if allocation.state == "PENDING" and allocation.queue_position else ""


def _waited(allocation: models.Allocation) -> bool:
    """Whether the allocation was admitted later than it was created: it waited in the queue."""
    return allocation.admit_time is not None and allocation.admit_time != allocation.create_time


def pending_reasons_table(items: Sequence[models.PendingReason], title: str) -> Table:
    """Why an allocation waits, most binding first: rank, kind, the sentence with its figures."""
    ranked = list(enumerate(items, start=1))
    return table(
        title,
        ["RANK", "REASON", "WHY"],
        ranked,
        lambda r: [str(r[0]), Text(r[1].kind, style="yellow"), r[1].message],
        right=("RANK",),
    )


def explanation(explained: models.AllocationExplanation) -> Group:
    """``allocations explain``: a line with the allocation's state (and, while it is PENDING, its
    place in its model's queue and its priority; once preempted, why), then the reasons it waits,
    most binding first."""
    a = explained.allocation
    if a.state != "PENDING":
        head = Text.assemble(f"{a.allocation_id} is not pending: it is ", styled(a.state))
        if a.admit_time is not None:
            head.append(f", admitted {when(a.admit_time)} UTC")
        if a.preempted_reason:
            head.append(f"; {a.preempted_reason}")
        return Group(head)
    head = Text.assemble(
        f"{a.allocation_id}: ",
        styled(a.state),
        f", position {a.queue_position} in the {a.gpu_model} queue, priority {a.priority},"
        f" {_asked(a)}; created {when(a.create_time)} UTC",
    )
    return Group(head, pending_reasons_table(explained.reasons, "Why it waits, most binding first"))


def _asked(allocation: models.Allocation) -> str:
    """ "2 node(s) asked whole", or "asks 2 GPUs of one node" (``part_asked``)."""
    if allocation.part_node:
        return f"asks {part_asked(allocation)} of one node"
    return f"{allocation.node_count} node(s) asked whole"


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


def fleet_table(summary: FleetSummary, recent: Sequence[StateChange]) -> Group:
    """A read of the fleet: a line with its time, total and how many nodes changed since the
    previous read; nodes per state (lifecycle order, zeros too) in all and per GPU model; and
    the ``recent`` changes, oldest first, each on its own line."""
    models = list(summary.models)

    def cells(state: str) -> list[Cell]:
        if state == "TOTAL":
            totals = [str(sum(summary.models[m].values())) for m in models]
            return [Text(state, style="bold"), str(summary.total), *totals]
        return [styled(state), str(summary.states[state]), *(str(summary.models[m].get(state, 0)) for m in models)]

    # Lines of their own rather than the table's title and caption, which rich folds to the
    # width of the table's few narrow columns.
    nodes = "node" if summary.total == 1 else "nodes"
    head = Text(
        f"{when(summary.read_time)} UTC: {summary.total} {nodes}, {summary.changed} changed since the last read"
    )
    grid = table("", ["STATE", "ALL", *models], [*summary.states, "TOTAL"], cells, right={"ALL", *models})
    changes = [Text(f"{when(change.read_time)}  {change}") for change in recent]
    return Group(head, grid, *changes)


def fail(message: str) -> None:
    """``error: <message>`` on stderr, the message exactly as written: it often repeats what the
    user typed, which must not be read as markup (``[red]``) or emoji codes (``:fire:``)."""
    errors.print(Text.assemble(("error", "red"), ": ", message))


def error(err: GpucloudError, *, address: str | None = None, labels: Mapping[str, str] | None = None) -> None:
    """An API error as a person should read it: code, reason, then each bad field or the message.

    ``labels`` names, for a field path, the command-line option that set it: the field is then
    shown as ``--nodes (node_count)``. The server's words are shown as written, never as markup."""
    head = Text.assemble(("error", "red"), f" {err.code.name}", (f" {err.reason}" if err.reason else "", "bold"), ":")
    if not err.field_violations:
        errors.print(Text.assemble(head, " ", err.message))
        if err.code is grpc.StatusCode.UNAVAILABLE and not err.reason and address is not None:
            # No ErrorInfo: the transport failed, not the server.
            errors.print(Text(f"  is a control plane serving at {address}? (--addr or GPUCLOUD_ADDR)"))
        return
    # The message repeats the violations: list them once, one per line.
    errors.print(head)
    labels = labels or {}
    for field, description in err.field_violations.items():
        label = labels.get(field, field)
        # "--zone", not "--zone (zone)"; "--nodes (node_count)" keeps the API's name.
        shown = label if label.strip("-").replace("-", "_").lower() == field else f"{label} ({field})"
        errors.print(Text.assemble("  ", (shown, "yellow"), f": {description}"))
    total = err.metadata.get("violations")
    if total is not None:
        errors.print(Text(f"  (the first {len(err.field_violations)} of {total} bad fields)"))

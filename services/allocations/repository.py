"""Persistence of allocations, their node assignments and idempotency keys.

Functions returning ``Tx`` are transaction steps (store/tx.py): compose them with
``yield from`` and run the whole with ``Database.transact`` or ``Database.query``. Rows come back
as plain ``Allocation`` records: building an SQLModel instance costs more than the whole
SQLite statement that read it (bench/api.py's profile), and nothing here needs the ORM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from services.allocations.shape import PartShape
from services.allocations.states import AllocationState
from services.errors import NotFound
from services.nodes import repository as nodes_repo
from services.nodes.transitions import NodeState
from services.paging import Cursor, newest_first
from services.store.tx import Sql, Tx, expand, for_update


@dataclass(frozen=True, slots=True)
class Allocation(PartShape):
    """One row of the ``allocations`` table (store/models.py defines the table); a part-node
    allocation's shape is ``PartShape``'s keywords."""

    allocation_id: str
    tenant_id: str
    gpu_model: str
    node_count: int
    state: str
    created_us: int
    cancel_us: int | None = None
    released_us: int | None = None
    priority: int = 0
    admitted_us: int | None = None
    same_block: bool = False
    # Why the scheduler cancelled it for a quota's owner (quotas.py); None otherwise.
    preempted_reason: str | None = None
    # The other GPU models it accepts, comma-separated in order of preference ("" for none):
    # while PENDING those after its first choice, once admitted onto one of them the rest.
    other_models: str = ""
    # Asked not to wait (taken in, not decided yet): the next cycle admits or withdraws it.
    fail_if_unavailable: bool = False

    @property
    def alternatives(self) -> tuple[str, ...]:
        """The further GPU models it accepts, in order of preference."""
        return tuple(self.other_models.split(",")) if self.other_models else ()


@dataclass(frozen=True, slots=True)
class Replacement:
    """A node the health controller took from an allocation at ``at_us``, and the spare that
    took its place in the allocation's order at ``spare_us`` (None: no spare free yet)."""

    removed_node_id: str
    spare_node_id: str | None
    position: int
    reason: str
    at_us: int
    spare_us: int | None


@dataclass(frozen=True, slots=True)
class GpuHold:
    """What a part-node allocation holds (or held) of one GPU of its node: ``gpu_index`` -1
    and ``gpu_uuid`` "" for CPU and memory alone; ``mig_start`` -1 but for a MIG slice."""

    node_id: str
    gpu_index: int
    gpu_uuid: str
    milli: int
    mig_start: int


@dataclass(frozen=True, slots=True)
class AllocationView:
    """An allocation with the nodes it holds (or held, once released) in placement order, and
    the replacements made under it, oldest first."""

    row: Allocation
    node_ids: tuple[str, ...]
    replacements: tuple[Replacement, ...] = ()
    # While PENDING, its place in its model's queue (1 for the head); 0 otherwise.
    queue_position: int = 0
    # A part-node allocation's GPUs, by index (live ones, or once released those it held).
    holds: tuple[GpuHold, ...] = ()
    # Why a part-node allocation's node drains while it holds GPUs there; "" otherwise.
    node_drain_reason: str = ""

    @property
    def degraded_reason(self) -> str:
        """Why an active allocation holds fewer nodes than it asked for, or why a part-node
        one's node drains under it; empty when neither."""
        if self.node_drain_reason and self.row.state == AllocationState.ACTIVE.value:
            return (
                f"degraded: its node {', '.join(self.node_ids)} is draining ({self.node_drain_reason}); it keeps"
                " its GPUs until cancelled and nothing moves it: cancel it and create it again to run elsewhere"
            )
        missing = self.row.node_count - len(self.node_ids)
        if self.row.state != AllocationState.ACTIVE.value or missing <= 0:
            return ""
        unfilled = [r for r in self.replacements if r.spare_node_id is None]
        removed = ", ".join(r.removed_node_id for r in unfilled) or "a node"
        return (
            f"degraded: {missing} of {self.row.node_count} node(s) missing; {removed} removed by the health"
            f" controller and no spare {self.row.gpu_model} node free yet (one takes its place once free)"
        )


@dataclass(frozen=True)
class AllocationFilter:
    """ListAllocations' filters; None matches every tenant or state."""

    tenant_id: str | None = None
    state: AllocationState | None = None


COLUMNS = (
    "allocation_id, tenant_id, gpu_model, node_count, state, created_us, cancel_us, released_us, priority,"
    " admitted_us, same_block, preempted_reason, other_models, gpus, mig_profile, share_milli, cpu_milli,"
    " memory_mib, fail_if_unavailable"
)
# Binds for an insert; dataclasses.asdict deep-copies and costs more than the INSERT itself.
_FIELDS = tuple(field.name for field in dataclasses.fields(Allocation))


def row_of(values: Sequence[Any]) -> Allocation:
    """An ``Allocation`` of a row read with ``COLUMNS``."""
    (
        allocation_id,
        tenant_id,
        gpu_model,
        node_count,
        state,
        created_us,
        cancel,
        released,
        priority,
        admitted,
        block,
        why,
        others,
        gpus,
        mig_profile,
        share_milli,
        cpu_milli,
        memory_mib,
        fail,
    ) = values
    return Allocation(
        allocation_id,
        tenant_id,
        gpu_model,
        node_count,
        state,
        created_us,
        cancel,
        released,
        priority,
        admitted,
        bool(block),  # SQLite answers a boolean as 0 or 1
        why,
        others,
        bool(fail),
        gpus=gpus,
        mig_profile=mig_profile,
        share_milli=share_milli,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
    )


def get_row(allocation_id: str, *, tenant_id: str | None, locking: bool = False) -> Tx[Allocation]:
    """The allocation if it exists and, when ``tenant_id`` is given, belongs to that tenant;
    locked for the transaction when ``locking`` (PostgreSQL).

    Another tenant's allocation is NOT_FOUND, exactly like one that does not exist, so ids
    cannot be probed across tenants.
    """
    sql = f"SELECT {COLUMNS} FROM allocations WHERE allocation_id = :id"
    params: dict[str, Any] = {"id": allocation_id}
    if tenant_id is not None:
        sql += " AND tenant_id = :tenant"
        params["tenant"] = tenant_id
    found = (yield Sql(sql + for_update(locking), params)).first()
    if found is None:
        raise NotFound.of("allocation", allocation_id, field_path="allocation_id")
    return row_of(found)


def get_rows(allocation_ids: Sequence[str], *, locking: bool = False) -> Tx[list[Allocation]]:
    """The allocations with these ids (any tenant), in no particular order; locked for the
    transaction, in id order, when ``locking`` (PostgreSQL)."""
    if not allocation_ids:
        return []
    ids, params = expand("id", allocation_ids)
    order = " ORDER BY allocation_id" + for_update(locking) if locking else ""
    result = yield Sql(f"SELECT {COLUMNS} FROM allocations WHERE allocation_id IN ({ids}){order}", params)
    return [row_of(r) for r in result.rows]


def views_by_id(allocation_ids: Sequence[str]) -> Tx[dict[str, AllocationView]]:
    """The views of those of the allocations that exist (any tenant), by id."""
    rows = yield from get_rows(sorted(set(allocation_ids)))
    return {view.row.allocation_id: view for view in (yield from views(rows))}


def views(rows: Sequence[Allocation]) -> Tx[list[AllocationView]]:
    """Attach each allocation's nodes, in placement order, with one query; and, with a second
    only for the allocations that had a node replaced, their replacements."""
    if not rows:
        return []
    ids, params = expand("id", [r.allocation_id for r in rows])
    result = yield Sql(
        f"SELECT allocation_id, node_id, replaced_us FROM assignments WHERE allocation_id IN ({ids})"
        " ORDER BY allocation_id, position",
        params,
    )
    nodes: dict[str, list[str]] = {r.allocation_id: [] for r in rows}
    replaced: set[str] = set()
    for allocation_id, node_id, replaced_us in result.rows:
        if replaced_us is None:
            nodes[allocation_id].append(node_id)
        else:
            replaced.add(allocation_id)
    history = (yield from replacements(sorted(replaced))) if replaced else {}
    waiting = [r for r in rows if r.state == AllocationState.PENDING.value]
    positions = (yield from queue_positions(waiting)) if waiting else {}
    part = [r.allocation_id for r in rows if r.part_node and r.state != AllocationState.PENDING.value]
    held = (yield from gpu_holds(part)) if part else {}
    views = []
    for r in rows:
        holds, drain_reason = held.get(r.allocation_id, _NOTHING_HELD)
        node_ids = tuple(nodes[r.allocation_id]) or tuple(dict.fromkeys(h.node_id for h in holds))
        views.append(
            AllocationView(
                r, node_ids, history.get(r.allocation_id, ()), positions.get(r.allocation_id, 0), holds, drain_reason
            )
        )
    return views


class HeldPart(NamedTuple):
    """What a part-node allocation holds or held, by GPU index, and why its node drains while
    it still holds it ("" when it does not)."""

    holds: tuple[GpuHold, ...]
    drain_reason: str


def gpu_holds(allocation_ids: Sequence[str]) -> Tx[dict[str, HeldPart]]:
    """The GPUs each part-node allocation holds or held, and why its node drains."""
    ids, params = expand("id", allocation_ids)
    result = yield Sql(
        "SELECT h.allocation_id, h.node_id, h.gpu_index, COALESCE(g.gpu_uuid, ''), h.milli, h.mig_start,"
        " CASE WHEN h.released_us IS NULL AND n.state = :draining THEN n.status_reason END"
        " FROM gpu_holds h JOIN nodes n ON n.node_id = h.node_id"
        " LEFT JOIN gpus g ON g.node_id = h.node_id AND g.gpu_index = h.gpu_index"
        f" WHERE h.allocation_id IN ({ids}) ORDER BY h.allocation_id, h.gpu_index",
        {**params, "draining": NodeState.DRAINING.value},
    )
    found: dict[str, list[GpuHold]] = {}
    draining: dict[str, str] = {}
    for allocation_id, node_id, index, uuid, milli, start, drain in result.rows:
        found.setdefault(str(allocation_id), []).append(
            GpuHold(str(node_id), int(index), str(uuid), int(milli), int(start))
        )
        if drain is not None:
            draining[str(allocation_id)] = str(drain) or "drained"
    return {a: HeldPart(tuple(held), draining.get(a, "")) for a, held in found.items()}


_NOTHING_HELD = HeldPart((), "")

# A model's queue in admission order: priority first, then age, the id breaking ties.
_QUEUE_ORDER = "priority DESC, created_us, allocation_id"


def queue(gpu_model: str, *, locking: bool = False, guests: bool = True) -> Tx[list[Allocation]]:
    """The PENDING allocations of ``gpu_model`` in admission order, with (unless ``guests`` is
    False) those of other models that also accept it; locked on PostgreSQL when ``locking``,
    so that a cancel of one waits for the cycle that may admit it."""
    also = " OR ',' || other_models || ',' LIKE :listed" if guests else ""
    result = yield Sql(
        f"SELECT {COLUMNS} FROM allocations WHERE state = :pending AND (gpu_model = :model{also})"
        f" ORDER BY {_QUEUE_ORDER}" + for_update(locking),
        {"pending": AllocationState.PENDING.value, "model": gpu_model, "listed": f"%,{gpu_model},%"},
    )
    return [row_of(r) for r in result.rows]


def running(gpu_model: str) -> Tx[list[Allocation]]:
    """The ACTIVE whole-node allocations of ``gpu_model``: the ones a reclaim may preempt
    (quotas count whole nodes)."""
    result = yield Sql(
        f"SELECT {COLUMNS} FROM allocations WHERE state = :active AND gpu_model = :model AND node_count > 0",
        {"active": AllocationState.ACTIVE.value, "model": gpu_model},
    )
    return [row_of(r) for r in result.rows]


def reclaiming(gpu_model: str) -> Tx[int]:
    """How many nodes of ``gpu_model`` preempted allocations still hold while they are released."""
    result = yield Sql(
        "SELECT COALESCE(SUM(node_count), 0) FROM allocations"
        " WHERE state = :cancelling AND gpu_model = :model AND preempted_reason IS NOT NULL",
        {"cancelling": AllocationState.CANCELLING.value, "model": gpu_model},
    )
    found = result.first()
    return 0 if found is None else int(found[0])


def mark_preempted(reasons: Sequence[tuple[str, str]]) -> Tx[None]:
    """Record why the scheduler cancelled each (allocation id, reason)."""
    yield Sql(
        "UPDATE allocations SET preempted_reason = :reason WHERE allocation_id = :id",
        rows=[{"id": allocation_id, "reason": reason} for allocation_id, reason in reasons],
    )


def queue_positions(rows: Sequence[Allocation]) -> Tx[dict[str, int]]:
    """Each PENDING allocation's place in its model's queue, 1 for the head: one query per model."""
    positions: dict[str, int] = {}
    for model in sorted({r.gpu_model for r in rows}):
        for place, queued in enumerate((yield from queue(model, guests=False)), start=1):
            positions[queued.allocation_id] = place
    return {r.allocation_id: positions[r.allocation_id] for r in rows if r.allocation_id in positions}


def queued_models() -> Tx[tuple[list[str], int]]:
    """The GPU models a PENDING allocation asks for or also accepts, and the most other models
    one of them accepts."""
    result = yield Sql(
        "SELECT DISTINCT gpu_model, other_models FROM allocations WHERE state = :pending",
        {"pending": AllocationState.PENDING.value},
    )
    models = {str(model) for model, _ in result.rows}
    others = [str(listed).split(",") for _, listed in result.rows if listed]
    models.update(other for listed in others for other in listed)
    return sorted(models), max(map(len, others), default=0)


def admit(admitted: Sequence[tuple[Allocation, Sequence[str]]], *, now_us: int) -> Tx[None]:
    """Turn PENDING allocations ACTIVE at ``now_us`` with their live assignments, each in placement order."""
    ids, params = expand("id", [row.allocation_id for row, _ in admitted])
    yield Sql(
        f"UPDATE allocations SET state = :active, admitted_us = :now WHERE allocation_id IN ({ids})",
        {**params, "active": AllocationState.ACTIVE.value, "now": now_us},
    )
    # One admitted onto another model it accepts is of that model from now on (queue.plan
    # gave it that model and the others it accepts).
    moved = [
        {"id": row.allocation_id, "model": row.gpu_model, "others": row.other_models}
        for row, _ in admitted
        if row.alternatives
    ]
    if moved:
        yield Sql(
            "UPDATE allocations SET gpu_model = :model, other_models = :others WHERE allocation_id = :id", rows=moved
        )
    yield from _insert_assignments(
        [(row, node_id, position, now_us) for row, node_ids in admitted for position, node_id in enumerate(node_ids)]
    )


def cancel_pending(allocation_ids: Sequence[str], *, now_us: int) -> Tx[None]:
    """End PENDING allocations at ``now_us``: they never held a node, so they are CANCELLED at once."""
    if not allocation_ids:
        return
    ids, params = expand("id", allocation_ids)
    yield Sql(
        "UPDATE allocations SET state = :cancelled, cancel_us = :now, released_us = :now"
        f" WHERE allocation_id IN ({ids})",
        {**params, "now": now_us, "cancelled": AllocationState.CANCELLED.value},
    )


def withdraw(allocation_ids: Sequence[str], *, key_method: str, locking: bool) -> Tx[set[str]]:
    """Delete those of the allocations still PENDING, with their idempotency keys (of
    ``key_method``), and return their ids: creates refused after they were taken in
    (fail_if_unavailable), never billed, so a retry with the same key is a new request."""
    if not allocation_ids:
        return set()
    rows = yield from get_rows(allocation_ids, locking=locking)
    gone = [row for row in rows if row.state == AllocationState.PENDING.value]
    if gone:
        ids, params = expand("id", [row.allocation_id for row in gone])
        # The tenants and the method lead the keys' primary key: the delete reads only their
        # tenants' create keys.
        tenants, tenant_params = expand("t", sorted({row.tenant_id for row in gone}))
        yield Sql(
            f"DELETE FROM idempotency_keys WHERE tenant_id IN ({tenants}) AND method = :method"
            f" AND result_id IN ({ids})",
            {**params, **tenant_params, "method": key_method},
        )
        yield Sql(f"DELETE FROM allocations WHERE allocation_id IN ({ids})", params)
    return {row.allocation_id for row in gone}


def replacements(allocation_ids: Sequence[str]) -> Tx[dict[str, tuple[Replacement, ...]]]:
    """The replacements made under each of the allocations, oldest first."""
    ids, params = expand("id", allocation_ids)
    result = yield Sql(
        "SELECT allocation_id, removed_node_id, spare_node_id, position, reason, at_us, spare_us FROM replacements"
        f" WHERE allocation_id IN ({ids}) ORDER BY allocation_id, at_us, position",
        params,
    )
    found: dict[str, list[Replacement]] = {}
    for allocation_id, removed, spare, position, reason, at_us, spare_us in result.rows:
        found.setdefault(str(allocation_id), []).append(
            Replacement(
                str(removed),
                None if spare is None else str(spare),
                int(position),
                str(reason),
                int(at_us),
                None if spare_us is None else int(spare_us),
            )
        )
    return {allocation_id: tuple(made) for allocation_id, made in found.items()}


@dataclass(frozen=True, slots=True)
class Holding:
    """The live assignment of a node: which allocation holds it, at which position."""

    allocation: Allocation
    position: int
    assigned_us: int


def holding(node_id: str) -> Tx[Holding | None]:
    """The allocation holding ``node_id`` now, or None."""
    columns = ", ".join(f"al.{column.strip()}" for column in COLUMNS.split(","))
    result = yield Sql(
        f"SELECT {columns}, a.position, a.assigned_us FROM assignments a"
        " JOIN allocations al ON al.allocation_id = a.allocation_id"
        " WHERE a.node_id = :node AND a.released_us IS NULL",
        {"node": node_id},
    )
    found = result.first()
    return None if found is None else Holding(row_of(found[:-2]), int(found[-2]), int(found[-1]))


def take_node(allocation_id: str, node_id: str, *, now_us: int) -> Tx[None]:
    """End ``node_id``'s live assignment to the allocation, as taken from it (not released with it)."""
    yield Sql(
        "UPDATE assignments SET released_us = :now, replaced_us = :now"
        " WHERE allocation_id = :id AND node_id = :node AND released_us IS NULL",
        {"id": allocation_id, "node": node_id, "now": now_us},
    )


def assign(held: Holding, node_id: str, *, now_us: int) -> Tx[None]:
    """A live assignment of ``node_id`` to ``held``'s allocation, at ``held``'s position."""
    yield from _insert_assignments([(held.allocation, node_id, held.position, now_us)])


def insert_replacement(allocation_id: str, made: Replacement) -> Tx[None]:
    """Record a replacement under the allocation."""
    yield Sql(
        "INSERT INTO replacements (allocation_id, removed_node_id, spare_node_id, position, reason, at_us, spare_us)"
        " VALUES (:id, :removed, :spare, :position, :reason, :at, :spare_at)",
        {
            "id": allocation_id,
            "removed": made.removed_node_id,
            "spare": made.spare_node_id,
            "position": made.position,
            "reason": made.reason,
            "at": made.at_us,
            "spare_at": made.spare_us,
        },
    )


def fill_replacement(allocation_id: str, removed_node_id: str, spare_node_id: str, *, now_us: int) -> Tx[None]:
    """Record the spare that took the removed node's place late, once one was free."""
    yield Sql(
        "UPDATE replacements SET spare_node_id = :spare, spare_us = :now"
        " WHERE allocation_id = :id AND removed_node_id = :removed AND spare_node_id IS NULL",
        {"id": allocation_id, "removed": removed_node_id, "spare": spare_node_id, "now": now_us},
    )


def degraded() -> Tx[list[str]]:
    """The ACTIVE allocations with a removed node no spare has replaced yet, oldest removal first."""
    result = yield Sql(
        "SELECT r.allocation_id, MIN(r.at_us) FROM replacements r"
        " JOIN allocations a ON a.allocation_id = r.allocation_id"
        " WHERE r.spare_node_id IS NULL AND a.state = :active GROUP BY r.allocation_id ORDER BY 2, 1",
        {"active": AllocationState.ACTIVE.value},
    )
    return [str(row[0]) for row in result.rows]


def ever_assigned(allocation_id: str) -> Tx[set[str]]:
    """Every node the allocation held at some time, live or not."""
    result = yield Sql("SELECT node_id FROM assignments WHERE allocation_id = :id", {"id": allocation_id})
    return {str(r[0]) for r in result.rows}


def get_view(allocation_id: str, *, tenant_id: str | None) -> Tx[AllocationView]:
    """``get_row`` with the allocation's nodes attached; NOT_FOUND likewise."""
    row = yield from get_row(allocation_id, tenant_id=tenant_id)
    return (yield from views([row]))[0]


def insert(row: Allocation, node_ids: Sequence[str]) -> Tx[None]:
    """Database a new allocation and its live assignments, in placement order."""
    yield from insert_many([(row, node_ids)])


def insert_many(placed: Sequence[tuple[Allocation, Sequence[str]]]) -> Tx[None]:
    """Database new allocations and their live assignments, each in placement order (none for
    a PENDING one): two statements however many there are."""
    yield Sql(
        f"INSERT INTO allocations ({COLUMNS}) VALUES (:allocation_id, :tenant_id, :gpu_model, :node_count,"
        " :state, :created_us, :cancel_us, :released_us, :priority, :admitted_us, :same_block, :preempted_reason,"
        " :other_models, :gpus, :mig_profile, :share_milli, :cpu_milli, :memory_mib, :fail_if_unavailable)",
        rows=[{name: getattr(row, name) for name in _FIELDS} for row, _ in placed],
    )
    yield from _insert_assignments(
        [
            (row, node_id, position, row.created_us)
            for row, node_ids in placed
            for position, node_id in enumerate(node_ids)
        ]
    )


def _insert_assignments(assigned: Sequence[tuple[Allocation, str, int, int]]) -> Tx[None]:
    """Live assignments, each (allocation, node id, position, assigned at), in one statement."""
    if not assigned:
        return
    yield Sql(
        "INSERT INTO assignments (allocation_id, node_id, tenant_id, position, assigned_us)"
        " VALUES (:allocation_id, :node_id, :tenant_id, :position, :assigned_us)",
        rows=[
            {
                "allocation_id": row.allocation_id,
                "node_id": node_id,
                "tenant_id": row.tenant_id,
                "position": position,
                "assigned_us": at_us,
            }
            for row, node_id, position, at_us in assigned
        ],
    )


def mark_cancelling(allocation_ids: Sequence[str], *, now_us: int) -> Tx[None]:
    """Turn the allocations CANCELLING, cancelled at ``now_us``; their nodes stay assigned until the release."""
    ids, params = expand("id", allocation_ids)
    yield Sql(
        f"UPDATE allocations SET state = :state, cancel_us = :now WHERE allocation_id IN ({ids})",
        {**params, "state": AllocationState.CANCELLING.value, "now": now_us},
    )


def list_page(flt: AllocationFilter, *, cursor: Cursor | None, limit: int) -> Tx[list[Allocation]]:
    """Newest first by (created_us, allocation_id): immutable, with a unique tiebreaker."""
    state = None if flt.state is None else flt.state.value
    page = newest_first(
        f"SELECT {COLUMNS} FROM allocations",
        "allocation_id",
        {"tenant_id": flt.tenant_id, "state": state},
        cursor=cursor,
        limit=limit,
    )
    return [row_of(r) for r in (yield page).rows]


@dataclass(frozen=True)
class HeldNode:
    """A node an allocation still holds, with the node's current state."""

    allocation_id: str
    node_id: str
    node_state: str
    # Its agent confirms its scrub (services/fleet/); otherwise the releaser stands in for one.
    agent_managed: bool = False


def lock_cancels_due(*, scrubbed_before_us: int, limit: int, locking: bool) -> Tx[list[str]]:
    """The ids of up to ``limit`` CANCELLING allocations cancelled at or before ``scrubbed_before_us``,
    oldest first, locked; on PostgreSQL rows another replica is releasing are skipped."""
    result = yield Sql(
        "SELECT allocation_id FROM allocations WHERE state = :state AND cancel_us <= :before"
        " ORDER BY cancel_us, allocation_id LIMIT :limit" + for_update(locking, skip_locked=True),
        {"state": AllocationState.CANCELLING.value, "before": scrubbed_before_us, "limit": limit},
    )
    return [str(r[0]) for r in result.rows]


def held_nodes(allocation_ids: Sequence[str], *, locking: bool) -> Tx[list[HeldNode]]:
    """Every node the allocations still hold, with its state, locked for the transaction;
    by allocation, each allocation's nodes in placement order."""
    if not allocation_ids:
        return []
    ids, params = expand("id", allocation_ids)
    result = yield Sql(
        "SELECT a.allocation_id, n.node_id, n.state, a.position, n.agent_managed FROM assignments a JOIN nodes n"
        f" ON n.node_id = a.node_id WHERE a.allocation_id IN ({ids}) AND a.released_us IS NULL"
        # Locked in fabric order, as placement locks them (see nodes.repository.fabric_order).
        f" ORDER BY {nodes_repo.fabric_order('n')}" + for_update(locking),
        params,
    )
    rows = sorted(result.rows, key=lambda r: (r[0], r[3]))
    return [HeldNode(str(r[0]), str(r[1]), str(r[2]), bool(r[4])) for r in rows]


def finish_cancel(allocation_ids: Sequence[str], *, now_us: int) -> Tx[None]:
    """End the allocations' live assignments and mark them CANCELLED at ``now_us``."""
    ids, params = expand("id", allocation_ids)
    yield Sql(
        f"UPDATE assignments SET released_us = :now WHERE allocation_id IN ({ids}) AND released_us IS NULL",
        {**params, "now": now_us},
    )
    yield Sql(
        f"UPDATE allocations SET state = :state, released_us = :now WHERE allocation_id IN ({ids})",
        {**params, "now": now_us, "state": AllocationState.CANCELLED.value},
    )


def oldest_cancel_us() -> Tx[int | None]:
    """When the oldest still-CANCELLING allocation was cancelled, or None if there is none."""
    result = yield Sql(
        "SELECT MIN(cancel_us) FROM allocations WHERE state = :state", {"state": AllocationState.CANCELLING.value}
    )
    found = result.first()
    return None if found is None or found[0] is None else int(found[0])


def idempotency_key(tenant_id: str, method: str, request_id: str) -> Tx[tuple[str, str] | None]:
    """The (fingerprint, result id) recorded for a key, or None; NOT_FOUND when the tenant
    does not exist. One query for both, since every create with a request_id asks both."""
    result = yield Sql(
        "SELECT k.fingerprint, k.result_id FROM tenants t LEFT JOIN idempotency_keys k"
        " ON k.tenant_id = t.tenant_id AND k.method = :method AND k.request_id = :request_id"
        " WHERE t.tenant_id = :tenant",
        {"tenant": tenant_id, "method": method, "request_id": request_id},
    )
    found = result.first()
    if found is None:
        raise NotFound.of("tenant", tenant_id, field_path="tenant_id")
    return None if found[0] is None else (str(found[0]), str(found[1]))


def recorded_results(method: str, keys: Sequence[tuple[str, str]]) -> Tx[dict[tuple[str, str], tuple[str, str]]]:
    """The (fingerprint, result id) recorded for each of the (tenant, request_id) ``keys`` of
    ``method`` that is recorded: one query for many."""
    if not keys:
        return {}
    tenants, tenant_params = expand("t", sorted({tenant for tenant, _ in keys}))
    request_ids, key_params = expand("k", sorted({request_id for _, request_id in keys}))
    result = yield Sql(
        f"SELECT tenant_id, request_id, fingerprint, result_id FROM idempotency_keys WHERE tenant_id IN ({tenants})"
        f" AND method = :method AND request_id IN ({request_ids})",
        {**tenant_params, **key_params, "method": method},
    )
    # Tenants and ids are matched separately above, so a pair may cross two keys: keep the asked ones.
    asked = set(keys)
    found = {(str(r[0]), str(r[1])): (str(r[2]), str(r[3])) for r in result.rows}
    return {key: value for key, value in found.items() if key in asked}


@dataclass(frozen=True, slots=True)
class KeyClaim:
    """An idempotency key to record, with the request's fingerprint and the result's id."""

    tenant_id: str
    method: str
    request_id: str
    fingerprint: str
    result_id: str


def claim_idempotency_key(
    tenant_id: str, method: str, request_id: str, *, fingerprint: str, result_id: str, now_us: int
) -> Tx[None]:
    """Record the key; a concurrent claim of the same key fails with ``Conflict``."""
    yield from claim_idempotency_keys([KeyClaim(tenant_id, method, request_id, fingerprint, result_id)], now_us=now_us)


def claim_idempotency_keys(claims: Sequence[KeyClaim], *, now_us: int) -> Tx[None]:
    """Record the keys in one statement; a key already recorded fails the whole with ``Conflict``."""
    if not claims:
        return
    yield Sql(
        "INSERT INTO idempotency_keys (tenant_id, method, request_id, fingerprint, result_id, created_us)"
        " VALUES (:tenant, :method, :request_id, :fingerprint, :result_id, :now)",
        rows=[
            {
                "tenant": claim.tenant_id,
                "method": claim.method,
                "request_id": claim.request_id,
                "fingerprint": claim.fingerprint,
                "result_id": claim.result_id,
                "now": now_us,
            }
            for claim in claims
        ],
    )


def prune_idempotency_keys(*, created_before_us: int, limit: int) -> Tx[int]:
    """Forget up to ``limit`` keys recorded before ``created_before_us``, oldest first; return
    how many. Bounded, so a backlog is pruned in short transactions that never hold the
    writer (or the event loop, on SQLite) for long."""
    result = yield Sql(
        "DELETE FROM idempotency_keys WHERE (tenant_id, method, request_id) IN"
        " (SELECT tenant_id, method, request_id FROM idempotency_keys WHERE created_us < :before"
        " ORDER BY created_us LIMIT :limit)",
        {"before": created_before_us, "limit": limit},
    )
    return result.rowcount

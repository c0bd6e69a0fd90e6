"""Creates and cancels that share one SQLite group, run set-based (store/batch.py).

Under load the SQLite writer commits dozens of creates and cancels together, and each of
them alone runs seven to nine statements. Run as a batch, the creates of a group take their
nodes with one placement query and write each table with one statement, and so do the
cancels: the Python and SQLite's own work per statement, which cost more than the rows they
write, are paid once per group instead of once per request.

A runner takes the batch in queue order for as long as the requests are plain ones, whose
answer it gives exactly as the request's own transaction (commands.py) would at that place:
a create with a new key (or none) for an existing tenant that fits in the nodes still free;
a cancel of an ACTIVE allocation the caller may see, with no cancel started. It stops at the
first other one (a replayed or reused key, an unknown tenant, not enough capacity, a second
request with the key or the allocation of an earlier one, a cancel repeated or refused),
which the writer runs alone before offering the rest again: every rule and every error
message stays in commands.py. The runners read everything they decide on before they write
(SQLite's writer holds the one write lock, so nothing changes in between).

The creates of one batch share one creation time (and the start of their usage), as the
cancels of one batch share one cancel time: they commit together. Among them, the lists'
order (time, then id) and the releaser's fall to the ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from services.allocations import repository as repo
from services.allocations.placement import Candidate, first_fit
from services.allocations.repository import Allocation, AllocationView, KeyClaim
from services.allocations.requests import CANCEL_KIND, CREATE_METHOD, AllocationRequest, Created, cancel_operation
from services.allocations.states import AllocationState
from services.auth.principal import Principal, tenant_scope
from services.clock import now_us
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel
from services.nodes.transitions import NodeEvent, NodeState
from services.operations import repository as ops_repo
from services.operations.repository import Operation
from services.store.tx import Tx
from services.tenants import repository as tenants_repo
from services.usage import repository as usage
from services.usage.repository import UsageKind

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PendingCreate:
    """One create in a batch: the request, its fingerprint and the id it will get."""

    request: AllocationRequest
    fingerprint: str
    allocation_id: str


@dataclass(frozen=True, slots=True)
class PendingCancel:
    """One cancel in a batch: who asks, which allocation, and the id its Operation will get."""

    principal: Principal
    allocation_id: str
    operation_id: str


def create_many(pending: Sequence[PendingCreate]) -> Tx[list[Created]]:
    """Place and record the longest prefix of ``pending`` made of plain creates, together."""
    tenants = yield from tenants_repo.existing(sorted({p.request.tenant_id for p in pending}))
    keyed = [(p.request.tenant_id, p.request.request_id) for p in pending if p.request.request_id]
    recorded = yield from repo.recorded_keys(CREATE_METHOD, keyed)
    plain = _prefix(
        pending,
        key=lambda p: (p.request.tenant_id, p.request.request_id or p.allocation_id),
        taken=lambda p: p.request.tenant_id in tenants and (p.request.tenant_id, p.request.request_id) not in recorded,
    )
    # The free nodes of each model, in placement order, as many as the prefix could use.
    wanted: dict[GpuModel, int] = {}
    for create in plain:
        wanted[create.request.gpu_model] = wanted.get(create.request.gpu_model, 0) + create.request.node_count
    pools: dict[GpuModel, list[Candidate]] = {}
    for model, count in wanted.items():
        free = yield from nodes_repo.free_nodes(model, limit=count, locking=False, skip_locked=False)
        pools[model] = [Candidate(*n) for n in free]
    now = now_us()
    answers: list[Created] = []
    placed: list[tuple[Allocation, Sequence[str]]] = []
    claims: list[KeyClaim] = []
    moves: list[nodes_repo.Move] = []
    for create in plain:
        request = create.request
        pool = pools[request.gpu_model]
        chosen = first_fit(pool, request.node_count)
        if chosen is None:
            break  # alone, it is refused with the count free at its place
        given = set(chosen)
        pools[request.gpu_model] = [c for c in pool if c.node_id not in given]
        row = Allocation(
            allocation_id=create.allocation_id,
            tenant_id=request.tenant_id,
            gpu_model=request.gpu_model,
            node_count=request.node_count,
            state=AllocationState.ACTIVE.value,
            created_us=now,
        )
        placed.append((row, chosen))
        if request.request_id:
            claims.append(
                KeyClaim(request.tenant_id, CREATE_METHOD, request.request_id, create.fingerprint, create.allocation_id)
            )
        actor = request.actor or f"tenant:{request.tenant_id}"
        moves.extend(
            nodes_repo.Move(node_id, NodeState.READY, NodeEvent.ALLOCATE, reason=create.allocation_id, actor=actor)
            for node_id in chosen
        )
        answers.append(Created(AllocationView(row, tuple(chosen)), replayed=False))
    if not placed:
        return answers
    # The same writes, in the same order, as a create alone (commands._create).
    yield from repo.claim_idempotency_keys(claims, now_us=now)
    yield from repo.insert_many(placed)
    yield from nodes_repo.apply_many(moves, reason="", actor="", now_us=now, uncordoned_only=True)
    yield from usage.record(UsageKind.START, [row.allocation_id for row, _ in placed], at_us=now)
    return answers


def cancel_many(pending: Sequence[PendingCancel]) -> Tx[list[tuple[Operation, AllocationView]]]:
    """Accept the longest prefix of ``pending`` made of plain cancels, together."""
    rows = {row.allocation_id: row for row in (yield from repo.get_rows([p.allocation_id for p in pending]))}
    started = yield from ops_repo.targets_with(CANCEL_KIND, list(rows))
    plain = _prefix(
        pending,
        key=lambda p: p.allocation_id,
        taken=lambda p: p.allocation_id not in started and _cancellable(rows.get(p.allocation_id), p.principal),
    )
    if not plain:
        return []
    ids = [cancel.allocation_id for cancel in plain]
    held = yield from repo.held_nodes(ids, locking=False)
    nodes: dict[str, list[str]] = {allocation_id: [] for allocation_id in ids}
    actors = {cancel.allocation_id: cancel.principal.actor for cancel in plain}
    moves: list[nodes_repo.Move] = []
    for h in held:
        nodes[h.allocation_id].append(h.node_id)
        moves.append(
            nodes_repo.Move(
                h.node_id,
                NodeState(h.node_state),
                NodeEvent.RELEASE,
                reason=f"{h.allocation_id} cancelled",
                actor=actors[h.allocation_id],
            )
        )
    now = now_us()
    answers: list[tuple[Operation, AllocationView]] = []
    for cancel in plain:
        was = rows[cancel.allocation_id]
        # Built directly: dataclasses.replace costs several microseconds a row.
        row = Allocation(
            was.allocation_id,
            was.tenant_id,
            was.gpu_model,
            was.node_count,
            AllocationState.CANCELLING.value,
            was.created_us,
            cancel_us=now,
        )
        operation = cancel_operation(cancel.operation_id, row.tenant_id, cancel.allocation_id, now_us=now)
        answers.append((operation, AllocationView(row, tuple(nodes[cancel.allocation_id]))))
    # The same writes, in the same order, as a cancel alone (commands._cancel).
    yield from nodes_repo.apply_many(moves, reason="", actor="", now_us=now)
    yield from repo.mark_cancelling(ids, now_us=now)
    yield from ops_repo.insert_many([operation for operation, _ in answers])
    return answers


def _cancellable(row: Allocation | None, principal: Principal) -> bool:
    """Whether a cancel of ``row`` by ``principal`` is a plain one: the row exists, the caller
    may see it, and it is still ACTIVE."""
    if row is None or row.state != AllocationState.ACTIVE:
        return False
    scope = tenant_scope(principal)
    return scope is None or scope == row.tenant_id


def _prefix(pending: Sequence[T], *, key: Callable[[T], object], taken: Callable[[T], bool]) -> list[T]:
    """The items of ``pending`` up to the first one not ``taken`` or whose ``key`` an earlier
    one has (a duplicate must see what the first did, so it runs alone after it)."""
    seen: set[object] = set()
    prefix: list[T] = []
    for item in pending:
        k = key(item)
        if k in seen or not taken(item):
            break
        seen.add(k)
        prefix.append(item)
    return prefix

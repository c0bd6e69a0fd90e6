"""Creates and cancels that share one SQLite group, run set-based (store/set_based.py).

Under load the SQLite writer commits dozens of creates and cancels together, and each of
them alone runs seven to nine statements. Run as a set, the creates of a group read their
candidates with one query per GPU model (the placement policy chooses for each create, in
queue order, among the nodes the creates before it left: one pool, each choice taken from it
before the next) and write each table with one
statement, and so do the cancels: the Python and SQLite's own work per statement, which
cost more than the rows they write, are paid once per group instead of once per request.

A runner takes the set in queue order for as long as the requests are plain ones, whose
answer it gives exactly as the request's own transaction (commands.py) would at that place:
a create with a new key (or none) for an existing tenant that fits in the nodes still free,
with nothing at its priority or above waiting in its model's queue, for a tenant without a
quota of the model;
a cancel of an ACTIVE allocation the caller may see, with no cancel started. It stops at the
first other one (a replayed or reused key, an unknown tenant, not enough capacity, a second
request with the key or the allocation of an earlier one, a cancel repeated or refused),
which the writer runs alone (where it may queue PENDING) before offering the rest again: every rule and every error
message stays in commands.py. The runners read everything they decide on before they write
(SQLite's writer holds the one write lock, so nothing changes in between).

The creates of one set share one creation time (and the start of their usage), as the
cancels of one set share one cancel time (and the stop of their usage): they commit
together. Each runner reads the clock after everything it decides on, inside the writer's
transaction, so nothing that committed before it is stamped later. Among them, the lists'
order (time, then id) and the releaser's fall to the ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from services.allocations import quotas, spares
from services.allocations import repository as repo
from services.allocations.placement import Candidate, Pool
from services.allocations.repository import Allocation, AllocationView
from services.allocations.requests import CANCEL_KIND, CREATE_METHOD, Created
from services.allocations.states import AllocationState
from services.allocations.writes import PendingCancel, PendingCreate, record_cancels, record_creates
from services.auth.principal import Principal, tenant_scope
from services.clock import now_us
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel
from services.operations import repository as ops_repo
from services.operations.repository import Operation
from services.store.tx import Tx
from services.tenants import repository as tenants_repo

T = TypeVar("T")


def create_many(pending: Sequence[PendingCreate]) -> Tx[list[Created]]:
    """Place and record the longest prefix of ``pending`` made of plain creates, together."""
    tenants = yield from tenants_repo.existing(sorted({p.request.tenant_id for p in pending}))
    keyed = [(p.request.tenant_id, p.request.request_id) for p in pending if p.request.request_id]
    recorded = yield from repo.recorded_keys(CREATE_METHOD, keyed)
    queued = yield from repo.queued_ahead(sorted({p.request.gpu_model for p in pending}))
    # A tenant with a quota of the model is counted against it alone (commands.py).
    limited = yield from quotas.limited_tenants(
        [p.request.tenant_id for p in pending], [p.request.gpu_model for p in pending]
    )
    plain = _prefix(
        pending,
        key=lambda p: (p.request.tenant_id, p.request.request_id or p.allocation_id),
        taken=lambda p: (
            p.request.tenant_id in tenants
            and (p.request.tenant_id, p.request.request_id) not in recorded
            and queued.get(p.request.gpu_model, -1) < p.request.priority
            and (p.request.tenant_id, p.request.gpu_model) not in limited
        ),
    )
    # Every free node of each model the prefix asks for: the policy chooses among them all,
    # each create among those the creates before it left.
    pools: dict[GpuModel, Pool] = {}
    keep: dict[GpuModel, int] = {}
    for model in dict.fromkeys(create.request.gpu_model for create in plain):
        pools[model] = Pool(map(Candidate._make, (yield from nodes_repo.free_nodes(model))))
        keep[model] = yield from spares.reserve(model, locking=False)
    placed: list[tuple[PendingCreate, Sequence[str]]] = []
    for create in plain:
        request = create.request
        pool = pools[request.gpu_model]
        chosen = pool.choose(
            create.policy,
            request.node_count,
            tenant=request.tenant_id,
            keep=keep[request.gpu_model],
            same_block=request.same_block,
        )
        if chosen is None:
            break  # alone, it is refused with the count free at its place
        pool.take(chosen)
        placed.append((create, chosen))
    if not placed:
        return []
    return (yield from record_creates(placed, now_us=now_us(), claim_keys=True))


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
    held = yield from repo.held_nodes([cancel.allocation_id for cancel in plain], locking=False)
    return (yield from record_cancels([(c, rows[c.allocation_id]) for c in plain], held, now_us=now_us()))


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

"""Creating, reading, listing and cancelling allocations: one transaction each.

Create and cancel are written as SQL steps (store/tx.py) and run with ``Database.transact``: on
SQLite in the writer's group commit, on PostgreSQL on the raw asyncpg connection.

A create claims its idempotency key in the same transaction as the placement, so concurrent
calls with one key serialize on the key's primary key: one places nodes, the others replay its
result. On PostgreSQL the key is claimed first: the losers' inserts wait for the winner's
commit and then fail with a unique violation (``tx.Conflict``), which sends them round the loop
to find the recorded result. On SQLite, whose writer runs one transaction at a time, the key is
claimed after the placement, so that a refusal has written nothing.

On SQLite a create or a cancel also offers itself to the set-based runner of its group
(set_based.py), which answers the plain ones exactly as the transactions here would; the
transactions here remain the rules, and run every request the runner does not take.

A transaction reads the clock only once it holds the rows it changes. On PostgreSQL a create
may wait for a duplicate holding its key and for other transactions' node locks, and a cancel
for its nodes' locks; whatever commits on those nodes meanwhile (a release, a cordon) must be
stamped before what this transaction writes on them, or a node's events run out of order and
the next tenant's hold begins before the previous one's ended.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from functools import partial
from typing import NamedTuple

import scheduling
from services.allocations import idempotency, queue, quotas, spares
from services.allocations import repository as repo
from services.allocations.placement import DEFAULT_POLICIES, Candidate, Policies, Pool
from services.allocations.repository import Allocation, AllocationFilter, AllocationView
from services.allocations.requests import CANCEL_KIND, CREATE_METHOD, AllocationRequest, Created, cancel_operation
from services.allocations.scheduler import plan_model
from services.allocations.set_based import cancel_many, create_many
from services.allocations.states import AllocationState
from services.allocations.writes import PendingCancel, PendingCreate, record_cancels, record_creates
from services.auth.principal import Principal, Role, tenant_scope
from services.clock import now_us
from services.errors import Aborted, PermissionDenied, ResourceExhausted
from services.ids import new_id
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel
from services.operations import repository as ops_repo
from services.operations.repository import Operation
from services.paging import Cursor, cut_page
from services.store.engine import Database
from services.store.set_based import SetBased
from services.store.tx import Conflict, Deadlock, Tx, rollback_to, savepoint
from services.tenants import repository as tenants_repo

# Rounds of "lost a race on PostgreSQL, look again" before answering ABORTED.
_MAX_ATTEMPTS = 5
# Rounds of "a chosen node was taken meanwhile, choose again" on PostgreSQL. Passing over
# locked nodes waits for nothing and costs a round trip a round, so a create may lose to every
# create in flight (one per pooled connection) before it waits; waiting, a round costs the
# commit it waited for.
_SKIPPING_ROUNDS = 32
_WAITING_ROUNDS = 4


def resolve_tenant(principal: Principal, requested: str) -> str:
    """The tenant a create acts for: a tenant's own id, or the one an operator names."""
    if principal.role is Role.TENANT:
        assert principal.tenant_id is not None
        if requested and requested != principal.tenant_id:
            raise PermissionDenied(
                reason="OTHER_TENANT",
                message="a tenant token can only allocate for its own tenant",
                metadata={"field": "tenant_id"},
            )
        return principal.tenant_id
    return requested


async def create(store: Database, request: AllocationRequest, policies: Policies = DEFAULT_POLICIES) -> Created:
    """Place the request's nodes and record the allocation, all or nothing, in one transaction;
    or, when they are not free or its model's queue holds allocations at least as high in
    priority, record it PENDING for the scheduler (scheduler.py).

    A ``request_id`` seen before replays its first result. RESOURCE_EXHAUSTED
    (INSUFFICIENT_CAPACITY) instead of waiting when the request says ``fail_if_unavailable``;
    NOT_FOUND for an unknown tenant; INVALID_ARGUMENT (IDEMPOTENCY_KEY_REUSED) for a key first
    used with another request; ABORTED after losing every attempt to concurrent transactions
    (IDEMPOTENCY_KEY_IN_USE while a duplicate holds the key, otherwise PLACEMENT_CONTENDED).
    The nodes are those the policy ``policies`` names for the model's pool chooses.
    """
    policy = policies.of(request.gpu_model.value)
    fields: dict[str, str | int] = {
        "tenant_id": request.tenant_id,
        "gpu_model": request.gpu_model,
        "node_count": request.node_count,
    }
    # The queue's fields count only when set, so that a key recorded before they existed
    # still replays an identical retry.
    optional_fields: dict[str, str | int] = {
        "priority": request.priority,
        "fail_if_unavailable": int(request.fail_if_unavailable),
        "same_block": int(request.same_block),
        "gpus": request.gpus,
        "mig_profile": request.mig_profile,
        "share_milli": request.share_milli,
        "cpu_milli": request.cpu_milli,
        "memory_mib": request.memory_mib,
        "other_models": ",".join(request.other_models),
    }
    fields.update({name: value for name, value in optional_fields.items() if value})
    fingerprint = idempotency.fingerprint(CREATE_METHOD, fields)
    locking = store.dialect == "postgresql"
    lost: Exception | None = None
    for _ in range(_MAX_ATTEMPTS):
        allocation_id = new_id("alloc")
        # On SQLite, the plain creates of one group run together (set_based.py); a part-node
        # one always waits for the scheduling cycle, which alone places on shared nodes.
        pending = PendingCreate(request, fingerprint, allocation_id, policy)
        set_based = None if locking or request.by_the_cycle else SetBased(create_many, pending)
        try:
            return await store.transact(partial(_create, pending, locking=locking, policies=policies), set_based)
        except (Conflict, Aborted) as error:
            # Lost a race (a key, a node, a deadlock) to a concurrent transaction: look again.
            lost = error
    if request.request_id and isinstance(lost, Conflict) and not isinstance(lost, Deadlock):
        # The last loss was a constraint: most likely the key, held by a duplicate in progress.
        raise idempotency.in_use(request.request_id)
    raise Aborted(
        reason="PLACEMENT_CONTENDED",
        message=f"placement lost {_MAX_ATTEMPTS} races to concurrent requests; retry",
        metadata={"gpu_model": request.gpu_model},
    )


def _create(pending: PendingCreate, *, locking: bool, policies: Policies = DEFAULT_POLICIES) -> Tx[Created]:
    request, policy = pending.request, pending.policy
    replayed = yield from _replay_or_claim(pending, locking=locking)
    if replayed is not None:
        return replayed
    if request.by_the_cycle:
        # Placed by the scheduling cycle alone (part of a node, or one of several models): only
        # asked whether it could be now.
        if request.fail_if_unavailable:
            yield from _check_fits(request, policies)
        created = (yield from record_creates([(pending, None)], now_us=now_us(), claim_keys=not locking))[0]
        return Created((yield from repo.views([created.view.row]))[0], replayed=False)
    # The pool's spares, locked on PostgreSQL until this create commits (spares.py).
    keep = yield from spares.reserve(request.gpu_model, locking=locking)
    # Allocations waiting in the model's queue at this priority or above go first (queue.py).
    top = (yield from repo.queued_ahead([request.gpu_model])).get(request.gpu_model)
    queued_ahead = top is not None and top >= request.priority
    # A tenant with a quota of the model is counted against it (quotas.py); over it, it waits.
    over_quota = None
    if (request.tenant_id, request.gpu_model) in (
        yield from quotas.limited_tenants([request.tenant_id], [request.gpu_model])
    ):
        ledger = yield from quotas.ledger(request.gpu_model, locking=locking)
        if ledger is not None and not ledger.fits(request.tenant_id, request.node_count):
            over_quota = ledger
    chosen = None
    if not queued_ahead and over_quota is None:
        chosen = yield from place(
            request.gpu_model,
            request.node_count,
            policy=policy,
            tenant=request.tenant_id,
            locking=locking,
            keep=keep,
            same_block=request.same_block,
        )
    if chosen is None and request.fail_if_unavailable:
        if over_quota is not None:
            raise _over_quota(request, over_quota)
        raise (yield from _unavailable(request, keep, queued_ahead=queued_ahead))
    # Stamped now that the chosen nodes are locked: a release of one of them that committed
    # while this create waited (for the key, for a lock) is earlier than this hand-over.
    now = now_us()
    # On SQLite transactions run one at a time, so the key can wait for a placement (claimed
    # in record_creates): a refusal then has written nothing, and its group needs no second
    # pass (store/writer.py). A create that cannot be placed now waits PENDING, holding
    # nothing, for the scheduler (scheduler.py).
    created = (yield from record_creates([(pending, chosen)], now_us=now, claim_keys=not locking))[0]
    if chosen is not None:
        return created
    return Created((yield from repo.views([created.view.row]))[0], replayed=False)


def _replay_or_claim(pending: PendingCreate, *, locking: bool) -> Tx[Created | None]:
    """A create's first step: the recorded result of its ``request_id`` (a replay), or None
    once the tenant is known to exist and, on PostgreSQL, the key is claimed."""
    request = pending.request
    if request.request_id:
        key = yield from repo.idempotency_key(request.tenant_id, CREATE_METHOD, request.request_id)
        if key is not None:
            recorded_fingerprint, recorded_id = key
            if recorded_fingerprint != pending.fingerprint:
                raise idempotency.reused(request.request_id)
            return Created((yield from repo.get_view(recorded_id, tenant_id=request.tenant_id)), replayed=True)
    else:
        yield from tenants_repo.require(request.tenant_id)
    if request.request_id and locking:
        # On PostgreSQL, claim the key before placing anything: concurrent duplicates queue here.
        yield from repo.claim_idempotency_key(
            request.tenant_id,
            CREATE_METHOD,
            request.request_id,
            fingerprint=pending.fingerprint,
            result_id=pending.allocation_id,
            now_us=now_us(),
        )
    return None


def _check_fits(request: AllocationRequest, policies: Policies) -> Tx[None]:
    """RESOURCE_EXHAUSTED unless the next scheduling cycle would admit a request it alone
    places that asked not to wait: the cycle's own plan of each of its models' queues, with it
    at its place, until one admits it; the reason given is its first choice's."""
    row = Allocation(
        "",
        request.tenant_id,
        request.gpu_model,
        request.node_count,
        AllocationState.PENDING.value,
        now_us(),
        priority=request.priority,
        same_block=request.same_block,
        other_models=",".join(request.other_models),
        gpus=request.gpus,
        mig_profile=request.mig_profile,
        share_milli=request.share_milli,
        cpu_milli=request.cpu_milli,
        memory_mib=request.memory_mib,
    )
    first = None
    for model in (request.gpu_model, *request.other_models):
        queued = yield from repo.queue(model)
        ahead = [q for q in queued if q.priority >= row.priority]
        made = yield from plan_model(model, [*ahead, row], policies.of(model), locking=False)
        reasons = made.waiting.get("")
        if not reasons:
            return
        first = first or reasons[0]
    assert first is not None  # at least its own model was planned
    raise ResourceExhausted(
        reason="INSUFFICIENT_CAPACITY",
        message=f"{first.message}; nothing was allocated (fail_if_unavailable)",
        metadata={
            "gpu_model": request.gpu_model,
            "reason": first.kind.value,
            **{name: str(value) for name, value in first.figures.items()},
        },
    )


def _over_quota(request: AllocationRequest, ledger: quotas.Ledger) -> ResourceExhausted:
    """The refusal of a create over its tenant's quota that asked not to wait."""
    # The reason speaks of the tenant and the ask only: the allocation was never made.
    row = Allocation("", request.tenant_id, request.gpu_model, request.node_count, AllocationState.PENDING.value, 0)
    reason = queue.quota_reason(row, ledger)
    return ResourceExhausted(
        reason="QUOTA_EXCEEDED",
        message=f"{reason.message}; nothing was allocated (fail_if_unavailable)",
        metadata={"gpu_model": request.gpu_model, **{name: str(value) for name, value in reason.figures.items()}},
    )


def _unavailable(request: AllocationRequest, keep: int, *, queued_ahead: bool) -> Tx[ResourceExhausted]:
    """The refusal of a create that asked not to wait."""
    available = yield from nodes_repo.count_free(request.gpu_model)
    held_back = f", {keep} of them held back as spares" if keep else ""
    queue_note = f"; allocations of priority {request.priority} or higher wait for them first" if queued_ahead else ""
    return ResourceExhausted(
        reason="INSUFFICIENT_CAPACITY",
        message=(
            f"{request.node_count} READY {request.gpu_model} node(s){' under one leaf switch' * request.same_block}"
            f" requested, {available} free{held_back}"
            f"{queue_note}; nothing was allocated (fail_if_unavailable)"
        ),
        metadata={
            "gpu_model": request.gpu_model,
            "requested": str(request.node_count),
            "free": str(available),
            "spares": str(keep),
            "queued_ahead": str(queued_ahead).lower(),
            "same_block": str(request.same_block).lower(),
        },
    )


def place(
    gpu_model: GpuModel,
    count: int,
    *,
    policy: scheduling.Policy,
    tenant: str,
    locking: bool,
    keep: int = 0,
    excluding: AbstractSet[str] = frozenset(),
    same_block: bool = False,
) -> Tx[list[str] | None]:
    """The ``count`` nodes ``policy`` chose for ``tenant`` among every free node of the model
    but ``excluding``, leaving ``keep`` free, under one leaf switch when ``same_block``, locked
    on PostgreSQL; None when it finds no fit.
    A create places with it, and so does a replacement (replacement.py) choosing a spare."""
    pool = Pool((yield from _candidates(gpu_model, excluding)))
    if not locking:
        # SQLite: the writer holds the one write lock, so what was read stays free.
        return pool.choose(policy, count, tenant=tenant, keep=keep, same_block=same_block)
    yield from savepoint("placement")
    choice = _Choice(policy, count, tenant, keep, same_block)
    chosen, contended = yield from _lock_choice(pool, choice, skip_locked=True)
    if chosen is not None or not contended:
        return chosen
    # SKIP LOCKED also passed over nodes a concurrent transaction holds and may yet release:
    # before refusing, look again and wait for those locks. _lock_choice has given back the
    # nodes it locked: two creates each holding some nodes while waiting for the other's
    # deadlocked (PostgreSQL broke it after a second, ABORTED). Waiting with no node held,
    # for nodes locked in fabric order in one statement, forms no cycle.
    pool = Pool((yield from _candidates(gpu_model, excluding)))
    chosen, _ = yield from _lock_choice(pool, choice, skip_locked=False)
    return chosen


class _Choice(NamedTuple):
    """What a placement asks its pool for (``Pool.choose``'s arguments)."""

    policy: scheduling.Policy
    nodes: int
    tenant: str
    keep: int
    same_block: bool

    def of(self, pool: Pool) -> list[str] | None:
        """The pool's choice, or None."""
        return pool.choose(self.policy, self.nodes, tenant=self.tenant, keep=self.keep, same_block=self.same_block)


def _candidates(gpu_model: GpuModel, excluding: AbstractSet[str]) -> Tx[list[Candidate]]:
    free = map(Candidate._make, (yield from nodes_repo.free_nodes(gpu_model)))
    return [c for c in free if c.node_id not in excluding] if excluding else list(free)


def _lock_choice(pool: Pool, choice: _Choice, *, skip_locked: bool) -> Tx[tuple[list[str] | None, bool]]:
    """Lock the policy's choice (PostgreSQL); while some chosen node was taken meanwhile,
    give back what was locked and choose again without it.

    Returns (chosen, contended): chosen is None when the policy finds no fit among the
    candidates left or, passing over locks, the rounds ran out; nothing is left locked then.
    contended tells whether some chosen node was lost on the way. Waiting for locks, running
    out of rounds is ABORTED (NODE_CHANGED_CONCURRENTLY), which ``create`` runs again.
    """
    lost: set[str] = set()
    rounds = _SKIPPING_ROUNDS if skip_locked else _WAITING_ROUNDS
    for _ in range(rounds):
        chosen = choice.of(pool)
        if chosen is None:
            return None, bool(lost)
        locked = yield from nodes_repo.lock_free(chosen, skip_locked=skip_locked)
        if len(locked) == choice.nodes:
            return chosen, False
        if locked:
            # Give these back before locking another choice: holding them while waiting for
            # nodes earlier in fabric order could close a cycle with another create.
            yield from rollback_to("placement")
        # A node lost to another transaction was taken: the pool no longer counts it free.
        missing = [node for node in chosen if node not in locked]
        pool.take(missing)
        lost.update(missing)
    if skip_locked:
        return None, True
    raise Aborted(
        reason="NODE_CHANGED_CONCURRENTLY",
        message="the nodes placement chose kept changing while this request ran; retry it",
        metadata={"node_ids": ",".join(sorted(lost))},
    )


async def get(store: Database, principal: Principal, allocation_id: str) -> AllocationView:
    """The allocation with its nodes; NOT_FOUND if there is none or, for a tenant, it is another tenant's."""
    return await store.query(repo.get_view(allocation_id, tenant_id=tenant_scope(principal)))


async def list_page(
    store: Database, flt: AllocationFilter, *, cursor: Cursor | None, page_size: int, tenant_must_exist: bool = False
) -> tuple[list[AllocationView], Cursor | None]:
    """One page and the cursor after it (None on the last page). ``tenant_must_exist``: the
    filter's tenant was named by an operator, and is NOT_FOUND when there is no such tenant
    (the parent of a list, as in AIP-132), rather than an empty list that hides a typo."""
    return await store.query(_page(flt, cursor=cursor, page_size=page_size, tenant_must_exist=tenant_must_exist))


def _page(
    flt: AllocationFilter, *, cursor: Cursor | None, page_size: int, tenant_must_exist: bool
) -> Tx[tuple[list[AllocationView], Cursor | None]]:
    if tenant_must_exist and flt.tenant_id is not None:
        yield from tenants_repo.require(flt.tenant_id)
    rows = yield from repo.list_page(flt, cursor=cursor, limit=page_size + 1)
    rows, after = cut_page(rows, page_size, lambda row: Cursor(row.created_us, row.allocation_id))
    return (yield from repo.views(rows)), after


async def cancel(store: Database, principal: Principal, allocation_id: str) -> tuple[Operation, AllocationView]:
    """Accept a cancel: the allocation turns CANCELLING, its nodes start scrubbing, and the
    tenant's hold of them ends (its usage stops) at this acceptance.

    Returns the cancel Operation, which the releaser completes once every node is released,
    and the allocation as it is now. Cancelling again returns the same Operation, done or not.
    """
    operation_id = new_id("op")
    locking = store.dialect == "postgresql"
    # On SQLite, the plain cancels of one group run together (set_based.py).
    set_based = None if locking else SetBased(cancel_many, PendingCancel(principal, allocation_id, operation_id))
    return await store.transact(partial(_cancel, principal, allocation_id, operation_id, locking=locking), set_based)


def _cancel(
    principal: Principal, allocation_id: str, operation_id: str, *, locking: bool
) -> Tx[tuple[Operation, AllocationView]]:
    row = yield from repo.get_row(allocation_id, tenant_id=tenant_scope(principal), locking=locking)
    existing = yield from ops_repo.for_target(CANCEL_KIND, allocation_id)
    if existing is not None:
        return existing, (yield from repo.views([row]))[0]
    if row.state == AllocationState.CANCELLED:
        # Its operation was deleted after it finished: answer with a finished one again.
        view = (yield from repo.views([row]))[0]
        operation = cancel_operation(
            operation_id, row.tenant_id, allocation_id, now_us=now_us(), done=True, done_us=row.released_us
        )
        yield from ops_repo.insert(operation)
        return operation, view
    if row.state == AllocationState.PENDING:
        # It holds nothing and was never billed: it ends now, and its cancel with it.
        now = now_us()
        yield from repo.cancel_pending(allocation_id, now_us=now)
        operation = cancel_operation(operation_id, row.tenant_id, allocation_id, now_us=now, done=True, done_us=now)
        yield from ops_repo.insert(operation)
        return operation, (yield from repo.get_view(allocation_id, tenant_id=None))
    # Not cancelled yet: every node it holds (not those the health controller took), in placement order.
    held = yield from repo.held_nodes([allocation_id], locking=locking)
    # Stamped once the nodes are locked: after anything that committed on them meanwhile.
    pending = PendingCancel(principal, allocation_id, operation_id)
    return (yield from record_cancels([(pending, row)], held, now_us=now_us()))[0]

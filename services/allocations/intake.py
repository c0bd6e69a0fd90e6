"""Taking in creates and cancels, set-based: the first step of a scheduling pass.

Every create and every cancel is accepted here, on either database, however many arrive
together. On the fleet's leader the scheduler (scheduler.py) hands ``accept`` whatever arrived
since its last pass, in one transaction, then plans; a replica that does not lead hands it one
request and leaves the placing to the leader. Nothing here places anything: a new create is
recorded PENDING, and the cycle that follows admits it, by the queue's one rule (queue.py).

Each request gets its own answer, a result or an error, so one bad request never fails the
others taken in with it:

- A create for a tenant that does not exist is NOT_FOUND. One whose ``request_id`` was
  recorded with another request is INVALID_ARGUMENT (IDEMPOTENCY_KEY_REUSED); with the same
  request it replays the recorded allocation. Of two creates with one key taken in together,
  the later replays the earlier. The key is recorded with the allocation, in one transaction.
- A cancel of an allocation the caller cannot see is NOT_FOUND, exactly like one that does not
  exist. A cancel already started answers its Operation, done or not. A PENDING allocation
  holds nothing and ends at once (CANCELLED), its cancel done. An admitted one turns
  CANCELLING: its nodes move on to their scrub and its usage stops now (writes.record_cancels).

Every statement reads or writes for the whole set, so a pass of sixty-four requests costs
about what one costs. Creates are taken in before cancels: a cancel never names an allocation
created in the same set (its id is not answered yet).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from services.allocations import idempotency
from services.allocations import repository as repo
from services.allocations.repository import Allocation, AllocationView
from services.allocations.requests import CANCEL_KIND, CREATE_METHOD, Created, cancel_operation
from services.allocations.states import AllocationState
from services.allocations.writes import PendingCancel, PendingCreate, record_cancels, record_pending
from services.auth.principal import tenant_scope
from services.clock import now_us
from services.errors import ApiError, NotFound
from services.operations import repository as ops_repo
from services.operations.repository import Operation
from services.store.tx import Tx
from services.tenants import repository as tenants_repo

T = TypeVar("T")
# What a cancel answers: its Operation and the allocation as it is now.
Cancelled = tuple[Operation, AllocationView]


@dataclass(frozen=True, slots=True)
class Accepted:
    """What ``accept`` answers, in the order asked: each create's allocation (a new one
    PENDING) or error, each cancel's answer or error, the ids of the new allocations, and the
    models with a queue once they were taken in (``repository.queued_models``; None when not read)."""

    creates: list[Created | ApiError]
    cancels: list[Cancelled | ApiError]
    recorded: list[str]
    queued: tuple[list[str], int] | None = None


def answer(outcome: T | ApiError) -> T:
    """A request's answer, or its error raised."""
    if isinstance(outcome, ApiError):
        raise outcome
    return outcome


class _Answer(NamedTuple):
    """A create's answer before the views are read: which allocation, and whether replayed."""

    allocation_id: str
    replayed: bool


def accept(
    creates: Sequence[PendingCreate], cancels: Sequence[PendingCancel], *, locking: bool, queued: bool = False
) -> Tx[Accepted]:
    """Record the new creates PENDING and accept the cancels; on PostgreSQL (``locking``) the
    cancelled allocations and their nodes are locked first; with ``queued`` (the leader's
    pass, which plans next), read the models with a queue too. Raises only what fails the
    whole set (a key claimed concurrently by another replica: ``tx.Conflict``, to run again)."""
    answered, recorded = yield from _creates(creates)
    cancelled = yield from _cancels(cancels, locking=locking)
    models = (yield from repo.queued_models()) if queued else None
    return Accepted(answered, cancelled, recorded, models)


def _creates(pending: Sequence[PendingCreate]) -> Tx[tuple[list[Created | ApiError], list[str]]]:
    if not pending:
        return [], []
    tenants = yield from tenants_repo.existing(sorted({p.request.tenant_id for p in pending}))
    keyed = [(p.request.tenant_id, p.request.request_id) for p in pending if p.request.request_id]
    recorded = yield from repo.recorded_results(CREATE_METHOD, keyed)
    answers: list[_Answer | ApiError] = []
    new: list[PendingCreate] = []
    for create in pending:
        request = create.request
        if request.tenant_id not in tenants:
            answers.append(NotFound.of("tenant", request.tenant_id, field_path="tenant_id"))
            continue
        key = (request.tenant_id, request.request_id)
        if request.request_id and key in recorded:
            fingerprint, result_id = recorded[key]
            same = fingerprint == create.fingerprint
            answers.append(_Answer(result_id, replayed=True) if same else idempotency.reused(request.request_id))
            continue
        if request.request_id:
            # A later create with this key in the same set replays this one.
            recorded[key] = (create.fingerprint, create.allocation_id)
        new.append(create)
        answers.append(_Answer(create.allocation_id, replayed=False))
    # A new allocation holds nothing yet: its view is its row. A replay's is read.
    shown = {row.allocation_id: AllocationView(row, ()) for row in (yield from record_pending(new, now_us=now_us()))}
    shown |= yield from repo.views_by_id([a.allocation_id for a in answers if isinstance(a, _Answer) and a.replayed])
    created = [a if not isinstance(a, _Answer) else _created(shown, a) for a in answers]
    return created, [create.allocation_id for create in new]


def _created(shown: dict[str, AllocationView], answer: _Answer) -> Created | ApiError:
    view = shown.get(answer.allocation_id)
    if view is None:  # a recorded key whose allocation is gone: as reading it would say
        return NotFound.of("allocation", answer.allocation_id, field_path="allocation_id")
    return Created(view, answer.replayed)


def _cancels(pending: Sequence[PendingCancel], *, locking: bool) -> Tx[list[Cancelled | ApiError]]:
    if not pending:
        return []
    # Locked as a cancel of theirs and a cycle lock them: allocations first, then their nodes.
    rows = {
        r.allocation_id: r
        for r in (yield from repo.get_rows(sorted({p.allocation_id for p in pending}), locking=locking))
    }
    started = yield from ops_repo.for_targets(CANCEL_KIND, list(rows))
    # Each cancel's allocation, or the error it gets; the first cancel of an allocation acts.
    acting: dict[str, PendingCancel] = {}
    found: list[Allocation | ApiError] = []
    for cancel in pending:
        row = rows.get(cancel.allocation_id)
        scope = tenant_scope(cancel.principal)
        if row is None or (scope is not None and scope != row.tenant_id):
            found.append(NotFound.of("allocation", cancel.allocation_id, field_path="allocation_id"))
            continue
        found.append(row)
        if row.allocation_id not in started:
            acting.setdefault(row.allocation_id, cancel)
    ending = [(c, rows[i]) for i, c in acting.items() if rows[i].state == AllocationState.PENDING.value]
    accepted = [(c, rows[i]) for i, c in acting.items() if rows[i].state not in _ENDED_OR_WAITING]
    held = yield from repo.held_nodes([row.allocation_id for _, row in accepted], locking=locking)
    # Stamped once the rows and nodes are locked: after anything that committed on them meanwhile.
    now = now_us()
    recorded = (yield from record_cancels(accepted, held, now_us=now)) if accepted else []
    answered = dict(zip((row.allocation_id for _, row in accepted), recorded, strict=True))

    # A PENDING allocation was never billed and holds nothing: it ends now, and its cancel with it.
    # A CANCELLED one whose Operation was deleted once done gets a done one again.
    done = [
        cancel_operation(
            c.operation_id,
            row.tenant_id,
            row.allocation_id,
            now_us=now,
            done=True,
            done_us=now if row.state == AllocationState.PENDING.value else row.released_us,
        )
        for i, c in acting.items()
        if (row := rows[i]).state in _ENDED_OR_WAITING
    ]
    yield from repo.cancel_pending([row.allocation_id for _, row in ending], now_us=now)
    yield from ops_repo.insert_many(done)
    operations = {**started, **{op.target_id: op for op in done}, **{i: op for i, (op, _) in answered.items()}}
    shown = {i: view for i, (_, view) in answered.items()}
    shown |= yield from repo.views_by_id([i for i in operations if i not in shown])
    return [r if isinstance(r, ApiError) else (operations[r.allocation_id], shown[r.allocation_id]) for r in found]


# States a cancel does not hand to record_cancels: nothing held to give back.
_ENDED_OR_WAITING = frozenset({AllocationState.PENDING.value, AllocationState.CANCELLED.value})

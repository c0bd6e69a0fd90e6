"""What an accepted create, an admission and an accepted cancel write, for a whole set.

The one place that says which rows they change, in which order: used by the intake
(intake.py), the scheduling cycle (scheduler.py) and a reclaim's preemptions. Each step is a
fixed number of statements however many allocations it writes for; it decides nothing, so
everything it is given must already have been checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from services.allocations import gpu_holds
from services.allocations import repository as repo
from services.allocations.part_node import PartPlacement
from services.allocations.repository import Allocation, AllocationView, HeldNode, KeyClaim
from services.allocations.requests import CREATE_METHOD, AllocationRequest, cancel_operation
from services.allocations.states import AllocationState
from services.auth.principal import Principal
from services.nodes import repository as nodes_repo
from services.nodes.transitions import NodeEvent, NodeState
from services.operations import repository as ops_repo
from services.operations.repository import Operation
from services.store.tx import Tx
from services.usage import repository as usage
from services.usage.repository import UsageKind

_NOBODY: Mapping[str, str] = {}


@dataclass(frozen=True, slots=True)
class PendingCreate:
    """One create: the request, its fingerprint, and the id it will get."""

    request: AllocationRequest
    fingerprint: str
    allocation_id: str


@dataclass(frozen=True, slots=True)
class PendingCancel:
    """One cancel: who asks, which allocation, and the id its Operation will get."""

    principal: Principal
    allocation_id: str
    operation_id: str


def record_pending(pending: Sequence[PendingCreate], *, now_us: int) -> Tx[list[Allocation]]:
    """Record new creates PENDING, holding nothing, with their idempotency keys, and return
    their rows: the scheduling cycle admits them (scheduler.py). Each is created a microsecond
    after the one before it, so that the queue's order (priority, then age) is the order in
    which they arrived; ids alone would order those of one millisecond at random."""
    if not pending:
        return []
    rows = [
        Allocation(
            allocation_id=create.allocation_id,
            tenant_id=create.request.tenant_id,
            gpu_model=create.request.gpu_model,
            node_count=create.request.node_count,
            state=AllocationState.PENDING.value,
            created_us=now_us + arrival,
            priority=create.request.priority,
            same_block=create.request.same_block,
            other_models=",".join(create.request.other_models),
            fail_if_unavailable=create.request.fail_if_unavailable,
            gpus=create.request.gpus,
            mig_profile=create.request.mig_profile,
            share_milli=create.request.share_milli,
            cpu_milli=create.request.cpu_milli,
            memory_mib=create.request.memory_mib,
        )
        for arrival, create in enumerate(pending)
    ]
    claims = [
        KeyClaim(r.tenant_id, CREATE_METHOD, r.request_id, create.fingerprint, create.allocation_id)
        for create in pending
        if (r := create.request).request_id
    ]
    yield from repo.claim_idempotency_keys(claims, now_us=now_us)
    yield from repo.insert_many([(row, ()) for row in rows])
    return rows


def record_admissions(
    admitted: Sequence[tuple[Allocation, Sequence[str]]],
    parts: Sequence[PartPlacement] = (),
    *,
    now_us: int,
    actor: str,
    asked_by: Mapping[str, str] = _NOBODY,
) -> Tx[None]:
    """Admit PENDING allocations onto the nodes chosen for them (in placement order), and
    part-node ones onto their GPUs: ACTIVE from ``now_us`` with their assignments or holds,
    and the hand-over (``hand_over``), in which a free node a part-node allocation opened
    turns ALLOCATED. The nodes' events name who asked for the allocation where ``asked_by``
    knows it (by allocation id), else ``actor``."""
    yield from repo.admit([*admitted, *((p.row, ()) for p in parts)], now_us=now_us)
    yield from gpu_holds.insert(parts, now_us=now_us)
    placed = [(row, node_ids) for row, node_ids in admitted] + [(p.row, [p.node_id] if p.opened else []) for p in parts]
    yield from hand_over(
        [(row, node_ids, asked_by.get(row.allocation_id, actor)) for row, node_ids in placed], now_us=now_us
    )


def hand_over(placed: Sequence[tuple[Allocation, Sequence[str], str]], *, now_us: int) -> Tx[None]:
    """What placing nodes for allocations (each with who asked) changes beyond the allocations
    themselves: the nodes READY -> ALLOCATED with their events, and a usage ``start`` per GPU.
    The live-assignment index refuses a node already held."""
    if not placed:
        return
    moves = [
        nodes_repo.Move(node_id, NodeState.READY, NodeEvent.ALLOCATE, reason=row.allocation_id, actor=actor)
        for row, node_ids, actor in placed
        for node_id in node_ids
    ]
    yield from nodes_repo.apply_many(moves, reason="", actor="", now_us=now_us, uncordoned_only=True)
    yield from _usage(UsageKind.START, [row for row, _, _ in placed], at_us=now_us)


def _usage(kind: UsageKind, rows: Sequence[Allocation], *, at_us: int) -> Tx[None]:
    """The usage events of ``kind`` for the allocations' nodes, or for part-node ones their GPUs."""
    yield from usage.record(kind, [row.allocation_id for row in rows if not row.part_node], at_us=at_us)
    yield from usage.record_holds(kind, [row.allocation_id for row in rows if row.part_node], at_us=at_us)


def record_cancels(
    accepted: Sequence[tuple[PendingCancel, Allocation]], held: Sequence[HeldNode], *, now_us: int
) -> Tx[list[tuple[Operation, AllocationView]]]:
    """Accept cancels of allocations not cancelled yet, given the nodes they hold (by
    allocation, in placement order): the nodes move on RELEASE with their events, a usage
    ``stop`` per GPU ends the tenant's hold at ``now_us`` (the scrub that follows is the
    provider's time), the allocations turn CANCELLING, and each gets its cancel Operation,
    not done."""
    nodes: dict[str, list[str]] = {cancel.allocation_id: [] for cancel, _ in accepted}
    actors = {cancel.allocation_id: cancel.principal.actor for cancel, _ in accepted}
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
    answers: list[tuple[Operation, AllocationView]] = []
    for cancel, was in accepted:
        # Built directly: dataclasses.replace inspects the fields again on every call, once a row.
        row = Allocation(
            was.allocation_id,
            was.tenant_id,
            was.gpu_model,
            was.node_count,
            AllocationState.CANCELLING.value,
            was.created_us,
            cancel_us=now_us,
            priority=was.priority,
            admitted_us=was.admitted_us,
            same_block=was.same_block,
            preempted_reason=was.preempted_reason,
            other_models=was.other_models,
            fail_if_unavailable=was.fail_if_unavailable,
            gpus=was.gpus,
            mig_profile=was.mig_profile,
            share_milli=was.share_milli,
            cpu_milli=was.cpu_milli,
            memory_mib=was.memory_mib,
        )
        operation = cancel_operation(cancel.operation_id, row.tenant_id, cancel.allocation_id, now_us=now_us)
        answers.append((operation, AllocationView(row, tuple(nodes[cancel.allocation_id]))))
    yield from nodes_repo.apply_many(moves, reason="", actor="", now_us=now_us)
    cancelled = [cancel.allocation_id for cancel, _ in accepted]
    # The tenant loses the nodes now, in the transaction that accepts the cancel: billing and
    # its reading of the nodes' metrics end here, whatever happens to the scrub. A part-node
    # allocation's GPUs stay held until the release, so no one else is given them before the
    # scrub time has passed.
    yield from _usage(UsageKind.STOP, [was for _, was in accepted], at_us=now_us)
    yield from repo.mark_cancelling(cancelled, now_us=now_us)
    yield from ops_repo.insert_many([operation for operation, _ in answers])
    part = [view.row for _, view in answers if view.row.part_node]
    if part:
        # A part-node allocation's node and GPUs are its holds, read with its view.
        shown = {view.row.allocation_id: view for view in (yield from repo.views(part))}
        answers = [(operation, shown.get(view.row.allocation_id, view)) for operation, view in answers]
    return answers

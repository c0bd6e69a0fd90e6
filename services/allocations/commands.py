"""Creating, reading, listing and cancelling allocations: one transaction each.

A create claims its idempotency key first, in the same transaction as the placement, so
concurrent calls with one key serialize on the key's primary key: one places nodes, the others
replay its result. On PostgreSQL the losers' inserts wait for the winner's commit and then
fail with a unique violation, which sends them round the loop to find the recorded result.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError

from services.allocations import idempotency
from services.allocations import repository as repo
from services.allocations.placement import Candidate, first_fit
from services.allocations.repository import AllocationFilter, AllocationView
from services.allocations.states import AllocationState
from services.auth.principal import Principal, Role, tenant_scope
from services.clock import now_us
from services.errors import Aborted, PermissionDenied, ResourceExhausted
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel
from services.nodes.transitions import NodeEvent, NodeState
from services.operations import repository as ops_repo
from services.paging import Cursor
from services.store import core
from services.store.engine import Store
from services.store.models import AllocationRow, AssignmentRow, IdempotencyKeyRow, OperationRow, table_of
from services.tenants import repository as tenants_repo
from services.usage import repository as usage
from services.usage.repository import Hold, UsageKind

CREATE_METHOD = "CreateAllocation"
CANCEL_KIND = "cancel-allocation"
# Rounds of "lost a race on PostgreSQL, look again" before answering ABORTED.
_MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class AllocationRequest:
    tenant_id: str
    gpu_model: GpuModel
    node_count: int
    request_id: str
    # Who asked, for the node events (a tenant, or an operator acting for one).
    actor: str = ""


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


async def create(store: Store, request: AllocationRequest) -> AllocationView:
    fingerprint = idempotency.fingerprint(
        CREATE_METHOD,
        {"tenant_id": request.tenant_id, "gpu_model": request.gpu_model, "node_count": request.node_count},
    )
    for _ in range(_MAX_ATTEMPTS):
        try:
            return await _create_once(store, request, fingerprint)
        except (IntegrityError, Aborted):
            # Lost a race (a key, a node) to a concurrent transaction: look again.
            continue
    if request.request_id:
        raise idempotency.in_use(request.request_id)
    raise Aborted(
        reason="PLACEMENT_CONTENDED",
        message=f"placement lost {_MAX_ATTEMPTS} races to concurrent requests; retry",
        metadata={"gpu_model": request.gpu_model},
    )


async def _create_once(store: Store, request: AllocationRequest, fingerprint: str) -> AllocationView:
    allocation_id = "alloc-" + secrets.token_hex(10)
    async with store.write() as session:
        if request.request_id:
            key = await repo.idempotency_key(session, request.tenant_id, CREATE_METHOD, request.request_id)
            if key is not None:
                recorded_fingerprint, allocation_id = key
                if recorded_fingerprint != fingerprint:
                    raise idempotency.reused(request.request_id)
                return await repo.get_view(session, allocation_id, tenant_id=request.tenant_id)
        await tenants_repo.require(session, request.tenant_id)
        now = now_us()
        if request.request_id:
            # Claim the key before placing anything: concurrent duplicates queue here.
            await core.execute(
                session,
                table_of(IdempotencyKeyRow)
                .insert()
                .values(
                    tenant_id=request.tenant_id,
                    method=CREATE_METHOD,
                    request_id=request.request_id,
                    fingerprint=fingerprint,
                    result_id=allocation_id,
                    created_us=now,
                ),
            )
        free = await nodes_repo.free_nodes(
            session, request.gpu_model, limit=request.node_count, skip_locked=store.dialect == "postgresql"
        )
        chosen = first_fit([Candidate(*n) for n in free], request.node_count)
        if chosen is None and store.dialect == "postgresql":
            # SKIP LOCKED also passes over nodes a concurrent transaction holds and may yet
            # release: before refusing, wait for those locks and look again.
            free = await nodes_repo.free_nodes(session, request.gpu_model, limit=request.node_count, skip_locked=False)
            chosen = first_fit([Candidate(*n) for n in free], request.node_count)
        if chosen is None:
            available = await nodes_repo.count_free(session, request.gpu_model)
            raise ResourceExhausted(
                reason="INSUFFICIENT_CAPACITY",
                message=(
                    f"{request.node_count} READY {request.gpu_model} node(s) requested, {available} free; "
                    "nothing was allocated"
                ),
                metadata={"gpu_model": request.gpu_model, "requested": str(request.node_count), "free": str(available)},
            )
        row = AllocationRow(
            allocation_id=allocation_id,
            tenant_id=request.tenant_id,
            gpu_model=request.gpu_model,
            node_count=request.node_count,
            state=AllocationState.ACTIVE,
            created_us=now,
        )
        await core.execute(session, table_of(AllocationRow).insert().values(**row.model_dump()))
        await nodes_repo.apply_many(
            session,
            [nodes_repo.Move(node_id, NodeState.READY, NodeEvent.ALLOCATE) for node_id in chosen],
            reason=allocation_id,
            actor=request.actor or f"tenant:{request.tenant_id}",
            now_us=now,
            uncordoned_only=True,
        )
        await core.execute(
            session,
            table_of(AssignmentRow).insert(),
            [
                {
                    "allocation_id": allocation_id,
                    "node_id": node_id,
                    "tenant_id": request.tenant_id,
                    "position": position,
                    "assigned_us": now,
                }
                for position, node_id in enumerate(chosen)
            ],
        )
        holds = [Hold(request.tenant_id, allocation_id, request.gpu_model, node_id) for node_id in chosen]
        await usage.record(session, UsageKind.START, holds, at_us=now)
        return AllocationView(row, tuple(chosen))


async def get(store: Store, principal: Principal, allocation_id: str) -> AllocationView:
    async with store.read() as session:
        return await repo.get_view(session, allocation_id, tenant_id=tenant_scope(principal))


async def list_page(
    store: Store, flt: AllocationFilter, *, cursor: Cursor | None, page_size: int
) -> tuple[list[AllocationView], Cursor | None]:
    """One page and the cursor after it (None on the last page)."""
    async with store.read() as session:
        rows = await repo.list_page(session, flt, cursor=cursor, limit=page_size + 1)
        more = len(rows) > page_size
        rows = rows[:page_size]
        page = await repo.views(session, rows)
    after = Cursor(rows[-1].created_us, rows[-1].allocation_id) if more else None
    return page, after


async def cancel(store: Store, principal: Principal, allocation_id: str) -> tuple[OperationRow, AllocationView]:
    """Accept a cancel: the allocation turns CANCELLING and its nodes start scrubbing.

    Returns the cancel Operation, which the releaser completes once every node is released,
    and the allocation as it is now. Cancelling again returns the same Operation, done or not.
    """
    async with store.write() as session:
        row = await repo.get_row(session, allocation_id, tenant_id=tenant_scope(principal), for_update=True)
        existing = await ops_repo.for_target(session, CANCEL_KIND, allocation_id)
        if existing is not None:
            return existing, (await repo.views(session, [row]))[0]
        now = now_us()
        operation = OperationRow(
            operation_id="op-" + secrets.token_hex(10),
            tenant_id=row.tenant_id,
            kind=CANCEL_KIND,
            target_id=allocation_id,
            created_us=now,
        )
        held = await repo.held_nodes(session, [allocation_id])
        if row.state == AllocationState.CANCELLED:
            # Its operation was deleted after it finished: answer with a finished one again.
            operation.done, operation.done_us = True, row.released_us
        else:
            row.state = AllocationState.CANCELLING
            row.cancel_us = now
            await nodes_repo.apply_many(
                session,
                [nodes_repo.Move(h.node_id, NodeState(h.node_state), NodeEvent.RELEASE) for h in held],
                reason=f"{allocation_id} cancelled",
                actor=principal.actor,
                now_us=now,
            )
        session.add(row)
        session.add(operation)
        view = (await repo.views(session, [row]))[0]
        return operation, view

"""Creating, reading, listing and cancelling allocations.

Reads are one query each. A create or a cancel is handed to the scheduler (scheduler.py),
which takes it in with whatever else arrived meanwhile (intake.py) and, for a create, places it
by the queue's rule in the same pass: the one write path for allocations, on both databases.
"""

from __future__ import annotations

from services.allocations import idempotency
from services.allocations import repository as repo
from services.allocations.intake import answer
from services.allocations.placement import DEFAULT_POLICIES, Policies
from services.allocations.repository import AllocationFilter, AllocationView
from services.allocations.requests import CREATE_METHOD, AllocationRequest, Created
from services.allocations.scheduler import Scheduler
from services.allocations.writes import PendingCancel, PendingCreate
from services.auth.principal import Principal, Role, tenant_scope
from services.errors import PermissionDenied
from services.ids import new_id
from services.operations.repository import Operation
from services.paging import Cursor, cut_page
from services.store.engine import Database
from services.store.tx import Tx
from services.tenants import repository as tenants_repo


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


async def create(
    store: Database,
    request: AllocationRequest,
    policies: Policies = DEFAULT_POLICIES,
    scheduler: Scheduler | None = None,
) -> Created:
    """Take the create in and let a scheduling pass place it (scheduler.py): ACTIVE when its
    whole gang was admitted, PENDING, holding nothing, while it waits in its model's queue.

    A ``request_id`` seen before replays its first result. RESOURCE_EXHAUSTED
    (INSUFFICIENT_CAPACITY, QUOTA_EXCEEDED) instead of waiting when the request says
    ``fail_if_unavailable``; NOT_FOUND for an unknown tenant; INVALID_ARGUMENT
    (IDEMPOTENCY_KEY_REUSED) for a key first used with another request. ``scheduler``: the
    server's, which batches this create with others; without one (a script, a test) the
    create runs a pass of its own, placing by ``policies``.
    """
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
    pending = PendingCreate(request, idempotency.fingerprint(CREATE_METHOD, fields), new_id("alloc"))
    if scheduler is not None:
        return await scheduler.create(pending)
    [created], _ = await Scheduler(store, policies).admit([pending])
    return answer(created)


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


async def cancel(
    store: Database, principal: Principal, allocation_id: str, scheduler: Scheduler | None = None
) -> tuple[Operation, AllocationView]:
    """Accept a cancel (intake.py): a PENDING allocation ends at once; an admitted one turns
    CANCELLING, its nodes start scrubbing, and the tenant's hold of them ends (its usage stops)
    at this acceptance.

    Returns the cancel Operation, which the releaser completes once every node is released,
    and the allocation as it is now. Cancelling again returns the same Operation, done or not.
    ``scheduler``: the server's, which takes the cancel in with others.
    """
    pending = PendingCancel(principal, allocation_id, new_id("op"))
    # Without a scheduler, taken in alone, as on a replica that does not lead: a cancel places nothing.
    return await (scheduler or Scheduler(store)).cancel(pending)

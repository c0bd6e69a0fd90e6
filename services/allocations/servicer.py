"""AllocationService: protobuf in, domain calls, protobuf out. No rules live here."""

from __future__ import annotations

from typing import Any

import grpc
from google.longrunning import operations_pb2

import scheduling
from gpucloud.v1 import allocation_pb2, allocation_pb2_grpc
from services.allocations import commands, part_node, quotas
from services.allocations.commands import resolve_tenant
from services.allocations.placement import DEFAULT_POLICIES, Policies
from services.allocations.proto import (
    ALLOCATION_STATE_FROM_PROTO,
    allocation_to_proto,
    quota_to_proto,
    reason_to_proto,
)
from services.allocations.repository import AllocationFilter
from services.allocations.requests import AllocationRequest
from services.allocations.scheduler import MAX_OTHER_MODELS, Scheduler, explain
from services.auth.principal import current_principal, tenant_scope
from services.nodes.proto import GPU_MODEL_FROM_PROTO
from services.notify import Notifier
from services.operations.proto import operation_to_proto
from services.paging import PageTokens
from services.store.engine import Database
from services.tenant_lists import TenantList
from services.validation import Violations, checked_id

Context = grpc.aio.ServicerContext[Any, Any]
MAX_NODES_PER_ALLOCATION = 256
MAX_PRIORITY = 1000
MAX_QUOTA_NODES = 100_000
_KNOWN_MODELS = frozenset(GPU_MODEL_FROM_PROTO)
_KNOWN_STATES = frozenset(ALLOCATION_STATE_FROM_PROTO)
# Trailing metadata on a create answered from an earlier call's result (the same request_id):
# the caller learns that this call allocated nothing, so it never counts the allocation twice.
REPLAYED = (("idempotent-replayed", "true"),)


def check_other_models(v: Violations, request: allocation_pb2.CreateAllocationRequest) -> None:
    """The further models a create accepts: known, each once, none its gpu_model, at most 4."""
    if len(request.other_models) > MAX_OTHER_MODELS:
        v.add("other_models", f"at most {MAX_OTHER_MODELS}; got {len(request.other_models)}")
        return
    seen = {request.gpu_model}
    for i, model in enumerate(request.other_models):
        if model not in _KNOWN_MODELS:
            v.add(f"other_models[{i}]", f"must be a known GPU model; got {model}")
        elif model in seen:
            v.add(f"other_models[{i}]", f"{GPU_MODEL_FROM_PROTO[model]} is asked for already")
        seen.add(model)


def check_part_node(v: Violations, request: allocation_pb2.CreateAllocationRequest) -> bool:
    """Whether the request asks for part of one node (GPUs, a MIG slice, a share, or CPU and
    memory alone), each of its fields checked; node_count must then be 0."""
    shapes = {
        "gpus": request.gpus != 0,
        "mig_profile": request.mig_profile != "",
        "share_milli": request.share_milli != 0,
    }
    asked = [name for name, given in shapes.items() if given]
    part = bool(asked) or request.cpu_milli != 0 or request.memory_mib != 0
    if not part:
        return False
    if len(asked) > 1:
        v.add(asked[1], f"give at most one of gpus, mig_profile and share_milli; got {' and '.join(asked)}")
    if request.node_count:
        v.add("node_count", "must be 0 with gpus, mig_profile, share_milli, cpu_milli or memory_mib (part of one node)")
    if request.gpus and request.gpus not in scheduling.GPU_COUNTS:
        counts = ", ".join(map(str, scheduling.GPU_COUNTS))
        v.add("gpus", f"must be one of {counts} (GPUs on one node); got {request.gpus}")
    if request.mig_profile and request.mig_profile not in scheduling.PROFILES:
        v.add("mig_profile", f"must be one of {', '.join(scheduling.PROFILES)}; got {request.mig_profile[:32]!r}")
    if request.share_milli and not 0 < request.share_milli < 1000:
        v.add("share_milli", f"must be 1-999 thousandths of a GPU (1000: ask for gpus=1); got {request.share_milli}")
    for name, value in (("cpu_milli", request.cpu_milli), ("memory_mib", request.memory_mib)):
        if value < 0:
            v.add(name, f"must not be negative; got {value}")
    if request.same_block:
        v.add("same_block", "applies to whole nodes; part of one node is on one node already")
    # Refused only when no model it accepts could ever hold it; the first model's reason says why.
    models = [GPU_MODEL_FROM_PROTO[m] for m in (request.gpu_model, *request.other_models) if m in GPU_MODEL_FROM_PROTO]
    nevers = [
        part_node.never_fits(
            m, mig_profile=request.mig_profile, cpu_milli=request.cpu_milli, memory_mib=request.memory_mib
        )
        for m in models
    ]
    if nevers and all(nevers) and nevers[0] is not None:
        v.add(*nevers[0])
    return True


class AllocationServicer(allocation_pb2_grpc.AllocationServiceServicer):
    """AllocationService: checks each request and the caller's tenant, then calls ``commands``."""

    def __init__(
        self,
        store: Database,
        page_tokens: PageTokens,
        wake_releaser: Notifier,
        scheduler: Scheduler,
        policies: Policies = DEFAULT_POLICIES,
    ) -> None:
        self._store = store
        self._tokens = page_tokens
        self._wake_releaser = wake_releaser
        self._scheduler = scheduler
        self._policies = policies

    async def CreateAllocation(
        self, request: allocation_pb2.CreateAllocationRequest, context: Context
    ) -> allocation_pb2.CreateAllocationResponse:
        """Allocate nodes for the caller's tenant (operators name one), or queue the allocation
        PENDING; a tenant naming another is PERMISSION_DENIED."""
        principal = current_principal()
        v = Violations()
        v.identifier("tenant_id", request.tenant_id, required=principal.tenant_id is None)
        v.enum("gpu_model", request.gpu_model, _KNOWN_MODELS)
        part = check_part_node(v, request)
        check_other_models(v, request)
        if not part and not 1 <= request.node_count <= MAX_NODES_PER_ALLOCATION:
            v.add("node_count", f"must be 1-{MAX_NODES_PER_ALLOCATION}; got {request.node_count}")
        if not 0 <= request.priority <= MAX_PRIORITY:
            v.add("priority", f"must be 0-{MAX_PRIORITY}; got {request.priority}")
        v.request_id("request_id", request.request_id)
        v.raise_if_any()
        allocation_request = AllocationRequest(
            tenant_id=resolve_tenant(principal, request.tenant_id),
            gpu_model=GPU_MODEL_FROM_PROTO[request.gpu_model],
            node_count=request.node_count,
            request_id=request.request_id,
            actor=principal.actor,
            priority=request.priority,
            fail_if_unavailable=request.fail_if_unavailable,
            same_block=request.same_block,
            other_models=tuple(GPU_MODEL_FROM_PROTO[m] for m in request.other_models if m in GPU_MODEL_FROM_PROTO),
            gpus=request.gpus,
            mig_profile=request.mig_profile,
            share_milli=request.share_milli,
            cpu_milli=request.cpu_milli,
            memory_mib=request.memory_mib,
        )
        view, replayed = await commands.create(self._store, allocation_request, scheduler=self._scheduler)
        if replayed:
            context.set_trailing_metadata(REPLAYED)
        return allocation_pb2.CreateAllocationResponse(allocation=allocation_to_proto(view))

    async def GetAllocation(
        self, request: allocation_pb2.GetAllocationRequest, context: Context
    ) -> allocation_pb2.GetAllocationResponse:
        """Read one allocation; a tenant sees only its own (another tenant's is NOT_FOUND)."""
        allocation_id = checked_id("allocation_id", request.allocation_id)
        view = await commands.get(self._store, current_principal(), allocation_id)
        return allocation_pb2.GetAllocationResponse(allocation=allocation_to_proto(view))

    async def ExplainAllocation(
        self, request: allocation_pb2.ExplainAllocationRequest, context: Context
    ) -> allocation_pb2.ExplainAllocationResponse:
        """Why an allocation is PENDING, most binding reason first; none once it is not."""
        allocation_id = checked_id("allocation_id", request.allocation_id)
        scope = tenant_scope(current_principal())
        view, reasons = await self._store.query(explain(allocation_id, tenant_id=scope, policies=self._policies))
        return allocation_pb2.ExplainAllocationResponse(
            allocation=allocation_to_proto(view), reasons=[reason_to_proto(r) for r in reasons]
        )

    async def SetQuota(
        self, request: allocation_pb2.SetQuotaRequest, context: Context
    ) -> allocation_pb2.SetQuotaResponse:
        """Set a tenant's quota of one GPU model; NOT_FOUND for an unknown tenant."""
        v = Violations()
        v.identifier("tenant_id", request.tenant_id, required=True)
        v.enum("gpu_model", request.gpu_model, _KNOWN_MODELS)
        for name in ("nodes", "borrow_limit"):
            value = getattr(request, name)
            if not 0 <= value <= MAX_QUOTA_NODES:
                v.add(name, f"must be 0 to {MAX_QUOTA_NODES:,}, not {value}")
        if request.cohort:
            v.identifier("cohort", request.cohort, required=False)
        v.raise_if_any()
        quota = await quotas.set_quota(
            self._store,
            current_principal(),
            request.tenant_id,
            GPU_MODEL_FROM_PROTO[request.gpu_model],
            request.nodes,
            request.borrow_limit,
            request.cohort,
        )
        # A larger quota, or a new cohort to borrow from, may admit what waits.
        self._scheduler.wake.notify()
        return allocation_pb2.SetQuotaResponse(quota=quota_to_proto(quota))

    async def ListQuotas(
        self, request: allocation_pb2.ListQuotasRequest, context: Context
    ) -> allocation_pb2.ListQuotasResponse:
        """Quotas with what each tenant holds; a tenant sees only its own (another's reads empty)."""
        v = Violations()
        v.identifier("tenant_id", request.tenant_id, required=False)
        v.raise_if_any()
        listing = TenantList(current_principal(), request.tenant_id)
        if listing.of_another_tenant:
            return allocation_pb2.ListQuotasResponse()
        found = await quotas.quotas(self._store, listing.tenant_id, tenant_must_exist=listing.tenant_must_exist)
        return allocation_pb2.ListQuotasResponse(quotas=[quota_to_proto(q) for q in found])

    async def ListAllocations(
        self, request: allocation_pb2.ListAllocationsRequest, context: Context
    ) -> allocation_pb2.ListAllocationsResponse:
        """List allocations; tenants see only their own (another's reads empty); an unknown tenant is NOT_FOUND."""
        v = Violations()
        size = v.page_size("page_size", request.page_size)
        v.identifier("tenant_id", request.tenant_id, required=False)
        v.enum("state", request.state, _KNOWN_STATES, required=False)
        listing = TenantList(current_principal(), request.tenant_id)
        scope = listing.scope("allocations", state=request.state)
        cursor = v.page_token(self._tokens, request.page_token, scope)
        v.raise_if_any()
        if listing.of_another_tenant:
            return allocation_pb2.ListAllocationsResponse()
        flt = AllocationFilter(tenant_id=listing.tenant_id, state=ALLOCATION_STATE_FROM_PROTO.get(request.state))
        page, after = await commands.list_page(
            self._store, flt, cursor=cursor, page_size=size, tenant_must_exist=listing.tenant_must_exist
        )
        return allocation_pb2.ListAllocationsResponse(
            allocations=[allocation_to_proto(a) for a in page],
            next_page_token=self._tokens.next_token(after, scope),
        )

    async def CancelAllocation(
        self, request: allocation_pb2.CancelAllocationRequest, context: Context
    ) -> operations_pb2.Operation:
        """Accept a cancel and wake the releaser; returns the cancel Operation (the same one on a repeat)."""
        allocation_id = checked_id("allocation_id", request.allocation_id)
        operation, view = await commands.cancel(self._store, current_principal(), allocation_id, self._scheduler)
        self._wake_releaser.notify()
        if view.row.admitted_us is None:
            # A queued allocation may have held up its queue's head. An admitted one frees its
            # nodes only once released, and the releaser wakes the scheduler then.
            self._scheduler.wake.notify()
        return operation_to_proto(operation, view)

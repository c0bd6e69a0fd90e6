"""What the allocation commands are asked and what a create answers: plain records, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from services.allocations.repository import AllocationView
from services.allocations.shape import PartShape
from services.nodes.inventory import GpuModel
from services.operations.repository import Operation

# The method an idempotency key of a create is scoped to, and the kind of a cancel's Operation.
CREATE_METHOD = "CreateAllocation"
CANCEL_KIND = "cancel-allocation"


@dataclass(frozen=True)
class AllocationRequest(PartShape):
    """A checked create: for which tenant, how many nodes of which model (or part of one node:
    ``PartShape``'s keywords), and its ``request_id`` ("" for none)."""

    tenant_id: str
    gpu_model: GpuModel
    node_count: int
    request_id: str
    # Who asked, for the node events (a tenant, or an operator acting for one).
    actor: str = ""
    # Higher is admitted first (queue.py).
    priority: int = 0
    # Refuse rather than wait PENDING when it cannot be admitted now.
    fail_if_unavailable: bool = False
    # Every node under one leaf switch (fabric block), or none.
    same_block: bool = False
    # Further GPU models it accepts, in order of preference: placed by the scheduling cycle.
    other_models: tuple[GpuModel, ...] = ()


class Created(NamedTuple):
    """What a create answers: the allocation, and whether it was made by an earlier call with
    the same ``request_id`` (a replay: this call placed nothing)."""

    view: AllocationView
    replayed: bool


def cancel_operation(
    operation_id: str,
    tenant_id: str,
    allocation_id: str,
    *,
    now_us: int,
    done: bool = False,
    done_us: int | None = None,
) -> Operation:
    """The Operation a cancel of ``allocation_id`` answers with, started at ``now_us``; ``done``
    for an allocation already released (at ``done_us``)."""
    return Operation(
        operation_id=operation_id,
        tenant_id=tenant_id,
        kind=CANCEL_KIND,
        target_id=allocation_id,
        done=done,
        error_message=None,
        created_us=now_us,
        done_us=done_us,
    )

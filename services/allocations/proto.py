"""The protobuf forms of allocations and their states, shared by AllocationService and the Operations
service; and of the spare pools they leave free (NodeService)."""

from __future__ import annotations

from gpucloud.v1 import allocation_pb2, node_pb2
from services.allocations.capacity import PoolCapacity
from services.allocations.defrag import DefragPlan, Held, Move
from services.allocations.queue import Reason, ReasonKind
from services.allocations.quotas import Quota
from services.allocations.repository import AllocationView
from services.allocations.spares import SparePool
from services.allocations.states import AllocationState
from services.nodes.inventory import GpuModel
from services.nodes.proto import GPU_MODEL_TO_PROTO, NODE_STATE_TO_PROTO
from services.nodes.transitions import NodeState
from services.timestamps import timestamp

# Built from both enums, so a state missing from one fails at import.
ALLOCATION_STATE_TO_PROTO = {s: allocation_pb2.AllocationState.Value(f"ALLOCATION_STATE_{s}") for s in AllocationState}
ALLOCATION_STATE_FROM_PROTO = {number: state for state, number in ALLOCATION_STATE_TO_PROTO.items()}
REASON_KIND_TO_PROTO = {k: allocation_pb2.PendingReasonKind.Value(f"PENDING_REASON_KIND_{k}") for k in ReasonKind}


def allocation_to_proto(view: AllocationView) -> allocation_pb2.Allocation:
    """The API form of an allocation, its nodes in placement order."""
    row = view.row
    return allocation_pb2.Allocation(
        allocation_id=row.allocation_id,
        tenant_id=row.tenant_id,
        gpu_model=GPU_MODEL_TO_PROTO[GpuModel(row.gpu_model)],
        node_count=row.node_count,
        state=ALLOCATION_STATE_TO_PROTO[AllocationState(row.state)],
        node_ids=list(view.node_ids),
        create_time=timestamp(row.created_us),
        cancel_time=timestamp(row.cancel_us),
        release_time=timestamp(row.released_us),
        replacements=[
            allocation_pb2.NodeReplacement(
                removed_node_id=made.removed_node_id,
                spare_node_id=made.spare_node_id or "",
                reason=made.reason,
                time=timestamp(made.at_us),
                spare_time=timestamp(made.spare_us),
            )
            for made in view.replacements
        ],
        degraded_reason=view.degraded_reason,
        priority=row.priority,
        queue_position=view.queue_position,
        admit_time=timestamp(row.admitted_us),
        same_block=row.same_block,
        preempted_reason=row.preempted_reason or "",
        other_models=[GPU_MODEL_TO_PROTO[GpuModel(m)] for m in row.alternatives],
        gpus=row.gpus,
        mig_profile=row.mig_profile,
        share_milli=row.share_milli,
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        gpu_holds=[
            allocation_pb2.GpuHold(
                node_id=h.node_id, gpu_index=h.gpu_index, gpu_uuid=h.gpu_uuid, milli=h.milli, mig_start=h.mig_start
            )
            for h in view.holds
        ],
    )


def quota_to_proto(quota: Quota) -> allocation_pb2.Quota:
    """The API form of a tenant's quota of one model."""
    return allocation_pb2.Quota(
        tenant_id=quota.tenant_id,
        gpu_model=GPU_MODEL_TO_PROTO[GpuModel(quota.gpu_model)],
        nodes=quota.nodes,
        borrow_limit=quota.borrow_limit,
        cohort=quota.cohort,
        used_nodes=quota.used,
        used_gpu_milli=quota.used_milli,
        actor=quota.actor,
        update_time=timestamp(quota.updated_us),
    )


def reason_to_proto(reason: Reason) -> allocation_pb2.PendingReason:
    """The API form of a reason an allocation waits."""
    return allocation_pb2.PendingReason(
        kind=REASON_KIND_TO_PROTO[reason.kind], message=reason.message, figures=reason.figures
    )


def pool_capacity_to_proto(pool: PoolCapacity) -> node_pb2.PoolFragmentation:
    """The API form of a pool's free capacity."""
    return node_pb2.PoolFragmentation(
        gpu_model=GPU_MODEL_TO_PROTO[GpuModel(pool.gpu_model)],
        nodes=len(pool.nodes),
        free_nodes=pool.free_nodes,
        free_gpus=pool.free_gpus,
        largest_free_block=pool.largest_free_block,
        stranded_gpus=pool.stranded_gpus,
        shared_nodes=pool.shared_nodes,
        node_capacity=[
            node_pb2.NodeCapacity(
                node_id=n.node_id,
                leaf_switch=n.leaf_switch,
                state=NODE_STATE_TO_PROTO[NodeState(n.state)],
                free_gpus=n.free_gpus,
                stranded=n.stranded,
                allocation_id=n.allocation_id,
                shared=n.shared,
            )
            for n in pool.nodes
        ],
    )


def defrag_plan_to_proto(made: DefragPlan, held: dict[str, Held]) -> node_pb2.PlanDefragmentationResponse:
    """The API form of a defragmentation plan."""
    return node_pb2.PlanDefragmentationResponse(
        freed_leaf_switches=made.freed,
        moves=[move_to_proto(m) for m in made.moves],
        costs=[
            node_pb2.DefragmentationCost(allocation_id=a, tenant_id=t, nodes_moved=moved, node_count=count)
            for a, t, moved, count in made.costs(held)
        ],
        summary=made.summary,
    )


def move_to_proto(move: Move) -> node_pb2.DefragmentationMove:
    """The API form of one defragmentation move."""
    return node_pb2.DefragmentationMove(
        allocation_id=move.allocation_id,
        tenant_id=move.tenant_id,
        from_node_id=move.from_node_id,
        to_node_id=move.to_node_id,
    )


def move_from_proto(move: node_pb2.DefragmentationMove) -> Move:
    """A move as an operator sent it back (its tenant is not read)."""
    return Move(move.allocation_id, "", move.from_node_id, move.to_node_id)


def spare_pool_to_proto(pool: SparePool) -> node_pb2.SparePool:
    """The API form of a pool's spares."""
    return node_pb2.SparePool(
        gpu_model=GPU_MODEL_TO_PROTO[GpuModel(pool.gpu_model)],
        spares=pool.spares,
        free_nodes=pool.free,
        actor=pool.actor,
        update_time=timestamp(pool.updated_us),
    )

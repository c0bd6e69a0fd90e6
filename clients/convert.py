"""Protobuf messages to the client's plain objects."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from google.longrunning import operations_pb2
from google.protobuf.descriptor import EnumDescriptor
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from clients import models
from clients.errors import InvalidValueError
from gpucloud.v1 import allocation_pb2, node_pb2, tenant_pb2, token_pb2

# An Allocation, or a create's answer that extends it (CreatedAllocation).
A = TypeVar("A", bound=models.Allocation)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ENUMS: dict[str, EnumDescriptor] = {
    "GpuModel": node_pb2.GpuModel.DESCRIPTOR,
    "NodeState": node_pb2.NodeState.DESCRIPTOR,
    "AllocationState": allocation_pb2.AllocationState.DESCRIPTOR,
    "PendingReasonKind": allocation_pb2.PendingReasonKind.DESCRIPTOR,
    "TokenRole": token_pb2.TokenRole.DESCRIPTOR,
    "IsolationViolationKind": node_pb2.IsolationViolationKind.DESCRIPTOR,
}


def optional_time(message: Message, field: str) -> datetime | None:
    """The Timestamp ``field`` of ``message`` as an aware UTC datetime, or None when unset."""
    if not message.HasField(field):
        return None
    ts: Timestamp = getattr(message, field)
    if 0 <= ts.nanos < 1_000_000_000:
        # What Timestamp.ToDatetime(tzinfo=UTC) gives, in about two thirds of its time.
        with contextlib.suppress(OverflowError):
            return _EPOCH + timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)
    return ts.ToDatetime(tzinfo=UTC)  # out of range: protobuf's own ValueError


def enum_name(descriptor_name: str, prefix: str, number: int) -> str:
    """``GpuModel`` 2 -> ``H100``. Unknown numbers from a newer server read ``UNKNOWN_<n>``."""
    return enum_label(_ENUMS[descriptor_name], prefix, number)


def enum_label(descriptor: EnumDescriptor, prefix: str, number: int) -> str:
    """``PRICE_CLASS_ON_DEMAND`` -> ``ON_DEMAND``; a number from a newer server reads ``UNKNOWN_<n>``."""
    value = descriptor.values_by_number.get(number)
    return value.name.removeprefix(prefix) if value is not None else f"UNKNOWN_{number}"


def _value(wrapper: Any, prefix: str, name: str, what: str, field: str) -> Any:
    """``H100`` or ``GPU_MODEL_H100`` -> its number; InvalidValueError for ``field`` naming the known values."""
    try:
        return wrapper.Value(name if name.startswith(prefix) else prefix + name.upper())
    except ValueError:
        known = ", ".join(n.removeprefix(prefix) for n in wrapper.keys()[1:])
        raise InvalidValueError(field, f"unknown {what} {name!r}; one of {known}") from None


def gpu_model_value(name: str, field: str = "gpu_model") -> node_pb2.GpuModel.ValueType:
    """``H100`` (any case) or ``GPU_MODEL_H100`` -> its number; InvalidValueError naming the
    known models and ``field``, the parameter it was given as."""
    value: node_pb2.GpuModel.ValueType = _value(node_pb2.GpuModel, "GPU_MODEL_", name, "GPU model", field)
    return value


def node_state_value(name: str) -> node_pb2.NodeState.ValueType:
    """``READY`` (any case) or ``NODE_STATE_READY`` -> its number; InvalidValueError naming the known states."""
    value: node_pb2.NodeState.ValueType = _value(node_pb2.NodeState, "NODE_STATE_", name, "node state", "state")
    return value


def allocation_state_value(name: str) -> allocation_pb2.AllocationState.ValueType:
    """``ACTIVE`` (any case) or ``ALLOCATION_STATE_ACTIVE`` -> its number; InvalidValueError naming the known states."""
    value: allocation_pb2.AllocationState.ValueType = _value(
        allocation_pb2.AllocationState, "ALLOCATION_STATE_", name, "allocation state", "state"
    )
    return value


def token_role_value(name: str) -> token_pb2.TokenRole.ValueType:
    """``AGENT`` (any case) or ``TOKEN_ROLE_AGENT`` -> its number; InvalidValueError naming the known roles."""
    value: token_pb2.TokenRole.ValueType = _value(token_pb2.TokenRole, "TOKEN_ROLE_", name, "token role", "role")
    return value


def tenant(message: tenant_pb2.Tenant) -> models.Tenant:
    """The client's ``Tenant`` of a Tenant message."""
    return models.Tenant(message.tenant_id, message.display_name, optional_time(message, "create_time"))


def node(message: node_pb2.Node) -> models.Node:
    """The client's ``Node`` of a Node message; an empty ``allocation_id`` reads None."""
    return models.Node(
        node_id=message.node_id,
        gpu_model=enum_name("GpuModel", "GPU_MODEL_", message.gpu_model),
        gpus=tuple(models.Gpu(g.uuid, g.index) for g in message.gpus),
        zone=message.zone,
        rack=message.rack,
        leaf_switch=message.leaf_switch,
        state=enum_name("NodeState", "NODE_STATE_", message.state),
        cordoned=message.cordoned,
        status_reason=message.status_reason,
        allocation_id=message.allocation_id or None,
        create_time=optional_time(message, "create_time"),
        state_change_time=optional_time(message, "state_change_time"),
        agent_managed=message.agent_managed,
        unreachable=message.unreachable,
    )


def node_event(message: node_pb2.NodeEvent) -> models.NodeEvent:
    """The client's ``NodeEvent`` of a NodeEvent message."""
    return models.NodeEvent(
        node_id=message.node_id,
        event=message.event,
        from_state=enum_name("NodeState", "NODE_STATE_", message.from_state),
        to_state=enum_name("NodeState", "NODE_STATE_", message.to_state),
        reason=message.reason,
        actor=message.actor,
        time=optional_time(message, "time"),
    )


def health_automation(message: node_pb2.HealthAutomation) -> models.HealthAutomation:
    """The client's ``HealthAutomation`` of a HealthAutomation message."""
    return models.HealthAutomation(
        gpu_model=enum_name("GpuModel", "GPU_MODEL_", message.gpu_model),
        paused=message.paused,
        reason=message.reason,
        actor=message.actor,
        updated=optional_time(message, "update_time"),
    )


def spare_pool(message: node_pb2.SparePool) -> models.SparePool:
    """The client's ``SparePool`` of a SparePool message."""
    return models.SparePool(
        gpu_model=enum_name("GpuModel", "GPU_MODEL_", message.gpu_model),
        spares=message.spares,
        free_nodes=message.free_nodes,
        actor=message.actor,
        updated=optional_time(message, "update_time"),
    )


def pool_fragmentation(message: node_pb2.PoolFragmentation) -> models.PoolFragmentation:
    """The client's ``PoolFragmentation`` of a PoolFragmentation message, its nodes in the server's
    (fabric) order; a node's empty ``allocation_id`` reads None."""
    return models.PoolFragmentation(
        gpu_model=enum_name("GpuModel", "GPU_MODEL_", message.gpu_model),
        nodes=message.nodes,
        free_nodes=message.free_nodes,
        free_gpus=message.free_gpus,
        largest_free_block=message.largest_free_block,
        stranded_gpus=message.stranded_gpus,
        shared_nodes=message.shared_nodes,
        node_capacity=tuple(
            models.NodeCapacity(
                node_id=n.node_id,
                leaf_switch=n.leaf_switch,
                state=enum_name("NodeState", "NODE_STATE_", n.state),
                free_gpus=n.free_gpus,
                stranded=n.stranded,
                allocation_id=n.allocation_id or None,
                shared=n.shared,
            )
            for n in message.node_capacity
        ),
    )


def defragmentation_move(message: node_pb2.DefragmentationMove) -> models.DefragmentationMove:
    """The client's ``DefragmentationMove`` of a DefragmentationMove message."""
    return models.DefragmentationMove(
        message.allocation_id, message.tenant_id, message.from_node_id, message.to_node_id
    )


def defragmentation_plan(message: node_pb2.PlanDefragmentationResponse) -> models.DefragmentationPlan:
    """The client's ``DefragmentationPlan`` of a PlanDefragmentationResponse, in the server's order."""
    return models.DefragmentationPlan(
        freed_leaf_switches=tuple(message.freed_leaf_switches),
        moves=tuple(defragmentation_move(m) for m in message.moves),
        costs=tuple(
            models.DefragmentationCost(c.allocation_id, c.tenant_id, c.nodes_moved, c.node_count) for c in message.costs
        ),
        summary=message.summary,
    )


def defragmentation_applied(message: node_pb2.ApplyDefragmentationResponse) -> models.DefragmentationApplied:
    """The client's ``DefragmentationApplied`` of an ApplyDefragmentationResponse, moves in order."""
    return models.DefragmentationApplied(tuple(defragmentation_move(m) for m in message.moves), message.made)


def quota(message: allocation_pb2.Quota) -> models.Quota:
    """The client's ``Quota`` of a Quota message."""
    return models.Quota(
        tenant_id=message.tenant_id,
        gpu_model=enum_name("GpuModel", "GPU_MODEL_", message.gpu_model),
        nodes=message.nodes,
        borrow_limit=message.borrow_limit,
        cohort=message.cohort,
        used_nodes=message.used_nodes,
        actor=message.actor,
        update_time=optional_time(message, "update_time"),
        used_gpu_milli=message.used_gpu_milli,
    )


def allocation(message: allocation_pb2.Allocation) -> models.Allocation:
    """The client's ``Allocation`` of an Allocation message."""
    return _allocation_as(models.Allocation, message)


def created_allocation(message: allocation_pb2.Allocation, *, replayed: bool) -> models.CreatedAllocation:
    """``allocation`` of a create's answer, with whether the server replayed it from the request's key."""
    return _allocation_as(models.CreatedAllocation, message, replayed=replayed)


def _allocation_as(kind: type[A], message: allocation_pb2.Allocation, **extra: Any) -> A:
    return kind(
        allocation_id=message.allocation_id,
        tenant_id=message.tenant_id,
        gpu_model=enum_name("GpuModel", "GPU_MODEL_", message.gpu_model),
        node_count=message.node_count,
        state=enum_name("AllocationState", "ALLOCATION_STATE_", message.state),
        node_ids=tuple(message.node_ids),
        create_time=optional_time(message, "create_time"),
        cancel_time=optional_time(message, "cancel_time"),
        release_time=optional_time(message, "release_time"),
        replacements=tuple(
            models.NodeReplacement(
                removed_node_id=made.removed_node_id,
                spare_node_id=made.spare_node_id or None,
                reason=made.reason,
                time=optional_time(made, "time"),
                spare_time=optional_time(made, "spare_time"),
            )
            for made in message.replacements
        ),
        degraded_reason=message.degraded_reason,
        priority=message.priority,
        queue_position=message.queue_position,
        admit_time=optional_time(message, "admit_time"),
        same_block=message.same_block,
        preempted_reason=message.preempted_reason,
        gpus=message.gpus,
        mig_profile=message.mig_profile,
        share_milli=message.share_milli,
        cpu_milli=message.cpu_milli,
        memory_mib=message.memory_mib,
        other_models=tuple(enum_name("GpuModel", "GPU_MODEL_", m) for m in message.other_models),
        gpu_holds=tuple(
            models.GpuHold(
                node_id=hold.node_id,
                gpu_index=hold.gpu_index,
                gpu_uuid=hold.gpu_uuid,
                milli=hold.milli,
                mig_start=hold.mig_start,
            )
            for hold in message.gpu_holds
        ),
        **extra,
    )


def allocation_explanation(message: allocation_pb2.ExplainAllocationResponse) -> models.AllocationExplanation:
    """The client's ``AllocationExplanation`` of an ExplainAllocationResponse, its reasons in the server's order."""
    return models.AllocationExplanation(
        allocation=allocation(message.allocation),
        reasons=tuple(
            models.PendingReason(
                kind=enum_name("PendingReasonKind", "PENDING_REASON_KIND_", reason.kind),
                message=reason.message,
                figures=dict(reason.figures),
            )
            for reason in message.reasons
        ),
    )


def isolation_audit(message: node_pb2.AuditIsolationResponse) -> models.IsolationAudit:
    """The client's ``IsolationAudit`` of an AuditIsolationResponse."""
    return models.IsolationAudit(
        nodes_checked=message.nodes_checked,
        violations=[
            models.IsolationViolation(
                node_id=v.node_id,
                kind=enum_name("IsolationViolationKind", "ISOLATION_VIOLATION_KIND_", v.kind),
                message=v.message,
                state=enum_name("NodeState", "NODE_STATE_", v.state),
                reported_partition_keys=tuple(v.reported_partition_keys),
                tenant_id=v.tenant_id,
                expected_partition_key=v.expected_partition_key,
            )
            for v in message.violations
        ],
    )


def operation(message: operations_pb2.Operation) -> models.Operation:
    """The client's ``Operation`` of a cancel-allocation Operation: progress from its CancelAllocationMetadata, the
    Allocation once done, and the error's code and message if it failed."""
    metadata = allocation_pb2.CancelAllocationMetadata()
    message.metadata.Unpack(metadata)
    response: models.Allocation | None = None
    if message.HasField("response"):
        unpacked = allocation_pb2.Allocation()
        message.response.Unpack(unpacked)
        response = allocation(unpacked)
    has_error = message.HasField("error")
    return models.Operation(
        name=message.name,
        done=message.done,
        allocation_id=metadata.allocation_id,
        state=enum_name("AllocationState", "ALLOCATION_STATE_", metadata.state),
        nodes_total=metadata.nodes_total,
        nodes_released=metadata.nodes_released,
        request_time=optional_time(metadata, "request_time"),
        release_time=optional_time(metadata, "release_time"),
        allocation=response,
        error_code=message.error.code if has_error else None,
        error_message=message.error.message if has_error else None,
    )


def api_token(message: token_pb2.ApiToken) -> models.ApiToken:
    """The client's ``ApiToken`` of an ApiToken message; an empty ``tenant_id`` or ``node_id`` reads None."""
    return models.ApiToken(
        token_id=message.token_id,
        role=enum_name("TokenRole", "TOKEN_ROLE_", message.role),
        tenant_id=message.tenant_id or None,
        node_id=message.node_id or None,
        create_time=optional_time(message, "create_time"),
        revoke_time=optional_time(message, "revoke_time"),
    )

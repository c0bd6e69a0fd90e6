"""The protobuf forms of nodes, their events, GPU models and states (translation only, no rules).

Domain enums hold the bare name (``READY``); proto enums the prefixed one
(``NODE_STATE_READY``). The tables are built from both enums, so adding a value to one and not
the other fails at import rather than at the first request that uses it.
"""

from __future__ import annotations

from gpucloud.v1 import node_pb2
from services.nodes.inventory import GpuModel
from services.nodes.repository import Gpu, NodeEventEntry, NodeView
from services.nodes.transitions import NodeState
from services.timestamps import timestamp

GPU_MODEL_TO_PROTO = {m: node_pb2.GpuModel.Value(f"GPU_MODEL_{m}") for m in GpuModel}
GPU_MODEL_FROM_PROTO = {number: model for model, number in GPU_MODEL_TO_PROTO.items()}

NODE_STATE_TO_PROTO = {s: node_pb2.NodeState.Value(f"NODE_STATE_{s}") for s in NodeState}
NODE_STATE_FROM_PROTO = {number: state for state, number in NODE_STATE_TO_PROTO.items()}


def node_to_proto(view: NodeView) -> node_pb2.Node:
    """The API form of a node."""
    row = view.row
    return node_pb2.Node(
        node_id=row.node_id,
        gpu_model=GPU_MODEL_TO_PROTO[GpuModel(row.gpu_model)],
        gpus=[gpu_to_proto(g) for g in view.gpus],
        zone=row.zone,
        rack=row.rack,
        leaf_switch=row.leaf_switch,
        state=NODE_STATE_TO_PROTO[NodeState(row.state)],
        cordoned=row.cordoned,
        status_reason=row.status_reason,
        allocation_id=view.allocation_id or "",
        create_time=timestamp(row.created_us),
        state_change_time=timestamp(row.state_changed_us),
        agent_managed=row.agent_managed,
        unreachable=row.unreachable,
    )


def gpu_to_proto(gpu: Gpu) -> node_pb2.Gpu:
    """The API form of one GPU; details not reported are left empty (0)."""
    d = gpu.details
    return node_pb2.Gpu(
        uuid=gpu.gpu_uuid,
        index=gpu.gpu_index,
        name=d.name or "",
        serial=d.serial or "",
        memory_bytes=d.memory_bytes or 0,
        driver_version=d.driver_version or "",
        vbios_version=d.vbios_version or "",
        inforom_version=d.inforom_version or "",
        rail=d.rail or 0,
    )


def node_event_to_proto(row: NodeEventEntry) -> node_pb2.NodeEvent:
    """The API form of one recorded state change of a node."""
    return node_pb2.NodeEvent(
        node_id=row.node_id,
        event=row.event,
        from_state=NODE_STATE_TO_PROTO[NodeState(row.from_state)],
        to_state=NODE_STATE_TO_PROTO[NodeState(row.to_state)],
        reason=row.reason,
        actor=row.actor,
        time=timestamp(row.at_us),
    )

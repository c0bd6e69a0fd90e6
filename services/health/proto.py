"""The protobuf form of the health controller's settings (translation only; no rules)."""

from __future__ import annotations

from gpucloud.v1 import node_pb2
from services.health.repository import Automation
from services.nodes.inventory import GpuModel
from services.nodes.proto import GPU_MODEL_TO_PROTO
from services.timestamps import timestamp


def automation_to_proto(automation: Automation) -> node_pb2.HealthAutomation:
    """The API form of one pool's setting."""
    return node_pb2.HealthAutomation(
        gpu_model=GPU_MODEL_TO_PROTO[GpuModel(automation.gpu_model)],
        paused=automation.paused,
        reason=automation.reason,
        actor=automation.actor,
        update_time=timestamp(automation.updated_us),
    )

"""The protobuf form of the isolation audit's answer."""

from __future__ import annotations

from collections.abc import Sequence

from gpucloud.v1 import node_pb2
from services.fabric.audit import Violation, ViolationKind
from services.nodes.proto import NODE_STATE_TO_PROTO

# Built from both enums, so a kind missing from one fails at import.
VIOLATION_KIND_TO_PROTO = {
    kind: node_pb2.IsolationViolationKind.Value(f"ISOLATION_VIOLATION_KIND_{kind}") for kind in ViolationKind
}


def audit_to_proto(checked: int, violations: Sequence[Violation]) -> node_pb2.AuditIsolationResponse:
    """AuditIsolation's answer: how many nodes were checked, and every violation."""
    return node_pb2.AuditIsolationResponse(
        nodes_checked=checked,
        violations=[
            node_pb2.IsolationViolation(
                node_id=v.node.node_id,
                kind=VIOLATION_KIND_TO_PROTO[v.kind],
                message=v.message,
                state=NODE_STATE_TO_PROTO[v.node.state],
                reported_partition_keys=v.node.reported,
                tenant_id=v.node.tenant_id or "",
                expected_partition_key=v.node.tenant_key or 0,
            )
            for v in violations
        ],
    )

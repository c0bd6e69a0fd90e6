"""Translation between domain values and their protobuf forms, shared by the servicers.

Domain enums hold the bare name (``READY``); proto enums the prefixed one
(``NODE_STATE_READY``). The tables below are built from both enums, so adding a value to one
and not the other fails at import rather than at the first request that uses it.
"""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from gpucloud.v1 import allocation_pb2, node_pb2, token_pb2
from services.allocations.states import AllocationState
from services.auth.principal import Role
from services.nodes.inventory import GpuModel
from services.nodes.transitions import NodeState


def timestamp(micros: int | None) -> Timestamp | None:
    """A protobuf Timestamp for microseconds since the epoch; None stays unset."""
    if micros is None:
        return None
    # The constructor, not Timestamp.FromMicroseconds: that one is pure Python and costs half
    # again as much, on every allocation and operation sent.
    seconds, remainder = divmod(micros, 1_000_000)
    return Timestamp(seconds=seconds, nanos=remainder * 1000)


GPU_MODEL_TO_PROTO = {m: node_pb2.GpuModel.Value(f"GPU_MODEL_{m}") for m in GpuModel}
GPU_MODEL_FROM_PROTO = {number: model for model, number in GPU_MODEL_TO_PROTO.items()}

NODE_STATE_TO_PROTO = {s: node_pb2.NodeState.Value(f"NODE_STATE_{s}") for s in NodeState}
NODE_STATE_FROM_PROTO = {number: state for state, number in NODE_STATE_TO_PROTO.items()}

ALLOCATION_STATE_TO_PROTO = {s: allocation_pb2.AllocationState.Value(f"ALLOCATION_STATE_{s}") for s in AllocationState}
ALLOCATION_STATE_FROM_PROTO = {number: state for state, number in ALLOCATION_STATE_TO_PROTO.items()}

# Roles' values are lower case (``operator``); the proto's names take the member's name.
ROLE_TO_PROTO = {r: token_pb2.TokenRole.Value(f"TOKEN_ROLE_{r.name}") for r in Role}
ROLE_FROM_PROTO = {number: role for role, number in ROLE_TO_PROTO.items()}

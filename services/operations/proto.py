"""The protobuf form of a stored operation: a ``google.longrunning.Operation`` (translation only)."""

from __future__ import annotations

from google.longrunning import operations_pb2
from google.protobuf.any_pb2 import Any as AnyProto

from gpucloud.v1 import allocation_pb2
from services.allocations.proto import ALLOCATION_STATE_TO_PROTO, allocation_to_proto
from services.allocations.repository import AllocationView
from services.allocations.states import AllocationState
from services.operations.repository import Operation, name_of
from services.timestamps import timestamp


def _pack(message: allocation_pb2.Allocation | allocation_pb2.CancelAllocationMetadata) -> AnyProto:
    packed = AnyProto()
    packed.Pack(message)
    return packed


def operation_to_proto(row: Operation, view: AllocationView) -> operations_pb2.Operation:
    """The Operation for ``row``, whose target allocation is ``view``: its metadata and, once
    done, the released allocation as its response."""
    released = len(view.node_ids) if row.done else 0
    metadata = allocation_pb2.CancelAllocationMetadata(
        allocation_id=view.row.allocation_id,
        state=ALLOCATION_STATE_TO_PROTO[AllocationState(view.row.state)],
        request_time=timestamp(view.row.cancel_us),
        release_time=timestamp(view.row.released_us),
        nodes_total=len(view.node_ids),
        nodes_released=released,
    )
    operation = operations_pb2.Operation(name=name_of(row.operation_id), done=row.done, metadata=_pack(metadata))
    if row.done:
        operation.response.CopyFrom(_pack(allocation_to_proto(view)))
    return operation

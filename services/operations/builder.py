"""Builds ``google.longrunning.Operation`` messages from stored operations."""

from __future__ import annotations

from google.longrunning import operations_pb2
from google.protobuf.any_pb2 import Any as AnyProto
from sqlmodel.ext.asyncio.session import AsyncSession

from gpucloud.v1 import allocation_pb2
from services.allocations import repository as allocations_repo
from services.allocations.proto import allocation_to_proto
from services.allocations.repository import AllocationView
from services.allocations.states import AllocationState
from services.convert import ALLOCATION_STATE_TO_PROTO, timestamp
from services.operations.repository import Operation, name_of
from services.store.tx import run_in_session


def _pack(message: allocation_pb2.Allocation | allocation_pb2.CancelAllocationMetadata) -> AnyProto:
    packed = AnyProto()
    packed.Pack(message)
    return packed


class OperationBuilder:
    """Reads what an operation is about and renders it with metadata and, once done, response."""

    async def build_in(self, session: AsyncSession, rows: list[Operation]) -> list[operations_pb2.Operation]:
        """Render operations, reading their allocations in ``session`` (the rows' snapshot)."""
        targets = await run_in_session(session, allocations_repo.get_rows([r.target_id for r in rows]))
        views = {v.row.allocation_id: v for v in await run_in_session(session, allocations_repo.views(targets))}
        return [self.render(row, views[row.target_id]) for row in rows]

    def render(self, row: Operation, view: AllocationView) -> operations_pb2.Operation:
        """The Operation for ``row``, whose target allocation is ``view``."""
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

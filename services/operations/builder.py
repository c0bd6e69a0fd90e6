"""Reads what stored operations are about, to render them as ``google.longrunning.Operation``."""

from __future__ import annotations

from collections.abc import Sequence

from google.longrunning import operations_pb2

from services.allocations import repository as allocations_repo
from services.operations.proto import operation_to_proto
from services.operations.repository import Operation
from services.store.tx import Tx


class OperationBuilder:
    """Reads the allocations that operations act on and renders each operation with them."""

    def build(self, rows: Sequence[Operation]) -> Tx[list[operations_pb2.Operation]]:
        """Render operations, reading their allocations: a step of the read that found the rows,
        so both come from one snapshot."""
        if not rows:
            return []
        targets = yield from allocations_repo.get_rows([r.target_id for r in rows])
        views = {v.row.allocation_id: v for v in (yield from allocations_repo.views(targets))}
        return [operation_to_proto(row, views[row.target_id]) for row in rows]

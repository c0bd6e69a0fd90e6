"""google.longrunning.Operations: read, wait for, list and delete operations.

Operations are scoped like the objects they act on: a tenant sees only its own, and another
tenant's operation is NOT_FOUND. Operations stay readable after they are done.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Any

import grpc
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.protobuf.empty_pb2 import Empty

from services.auth.principal import current_principal, lister, tenant_scope
from services.errors import FailedPrecondition
from services.operations import repository as repo
from services.operations.builder import OperationBuilder
from services.operations.watch import OperationWatch
from services.paging import Cursor, PageTokens, cut_page
from services.store.engine import Database
from services.store.tx import Tx
from services.validation import ID_PATTERN, Violations

Context = grpc.aio.ServicerContext[Any, Any]
# What ListOperationsRequest.name may name: the parent of every operation's name.
COLLECTION = repo.NAME_PREFIX.rstrip("/")
DEFAULT_WAIT_SECONDS = 30.0
MAX_WAIT_SECONDS = 300.0
# The most a wait answers before the caller's deadline (see answer_within).
ANSWER_MARGIN_SECONDS = 0.5
# google.protobuf.Duration's documented range: +-10,000 years.
MAX_DURATION_SECONDS = 315_576_000_000


def answer_within(wait: float, remaining: float | None) -> float:
    """Seconds a wait of ``wait`` may last when the caller's deadline is ``remaining`` seconds away
    (None: no deadline): it answers a tenth of the time left early, at most ``ANSWER_MARGIN_SECONDS``,
    so that the answer, sent from a busy server, still arrives before the deadline."""
    if remaining is None:
        return wait
    return max(0.0, min(wait, remaining - min(remaining / 10, ANSWER_MARGIN_SECONDS)))


def _operation_id(v: Violations, name: str) -> str:
    """The id in ``name`` (``operations/<id>``); when it is not one, a violation of ``name`` in ``v``."""
    operation_id = repo.id_from_name(name)
    if operation_id is None or not ID_PATTERN.fullmatch(operation_id):
        v.add("name", f"{name[:80]!r} is not an operation name ('operations/<id>')")
        return ""
    return operation_id


def _checked_operation_id(name: str) -> str:
    """The id in ``name``, a request's only field; INVALID_ARGUMENT when it names no operation."""
    v = Violations()
    operation_id = _operation_id(v, name)
    v.raise_if_any()
    return operation_id


class OperationsServicer(operations_pb2_grpc.OperationsServicer):
    """google.longrunning.Operations over the stored operations; a tenant sees only its own."""

    def __init__(
        self, store: Database, page_tokens: PageTokens, builder: OperationBuilder, watch: OperationWatch
    ) -> None:
        self._store = store
        self._tokens = page_tokens
        self._builder = builder
        self._watch = watch

    async def GetOperation(
        self, request: operations_pb2.GetOperationRequest, context: Context
    ) -> operations_pb2.Operation:
        """Read an operation by name; another tenant's is NOT_FOUND."""
        operation_id = _checked_operation_id(request.name)
        scope = tenant_scope(current_principal())
        _row, operation = await self._store.query(_rendered(self._builder, operation_id, tenant_id=scope))
        return operation

    async def WaitOperation(
        self, request: operations_pb2.WaitOperationRequest, context: Context
    ) -> operations_pb2.Operation:
        """Return once the operation is done or the timeout passes (done=false then), and in any
        case a little before the caller's deadline (``answer_within``)."""
        v = Violations()
        operation_id = _operation_id(v, request.name)
        wait = DEFAULT_WAIT_SECONDS
        if request.HasField("timeout"):
            seconds, nanos = request.timeout.seconds, request.timeout.nanos
            if not (0 <= seconds <= MAX_DURATION_SECONDS and 0 <= nanos < 1_000_000_000):
                v.add("timeout", "must be a non-negative google.protobuf.Duration")
            else:
                # Anything beyond the cap waits the cap; no need to convert an enormous value.
                wait = min(seconds + nanos / 1e9, MAX_WAIT_SECONDS)
        v.raise_if_any()
        deadline = time.monotonic() + answer_within(wait, context.time_remaining())
        scope = tenant_scope(current_principal())
        # Watched before the read, so that a completion after it is not missed; after the read,
        # this call touches the database no more (the watch reads for every waiter).
        with self._watch.watching(operation_id) as watched:
            if watched.known is None:
                row, current = await self._store.query(_rendered(self._builder, operation_id, tenant_id=scope))
                if row.done:
                    return current
                watched.known = (row, current)
            else:
                # Read by another waiter and not done since: visible to this caller or not alike.
                row, current = watched.known
                repo.visible(operation_id, row, tenant_id=scope)
            left = deadline - time.monotonic()
            if left > 0:
                await asyncio.wait([watched.finished], timeout=left)
            finished = watched.finished
            return finished.result() if finished.done() and not finished.cancelled() else current

    async def ListOperations(
        self, request: operations_pb2.ListOperationsRequest, context: Context
    ) -> operations_pb2.ListOperationsResponse:
        """List operations newest first, a tenant's own only; ``name`` is empty or ``operations``, ``filter`` empty."""
        principal = current_principal()
        v = Violations()
        size = v.page_size("page_size", request.page_size)
        if request.name not in ("", COLLECTION):
            # The parent of the listed operations: there is one collection, so it adds nothing.
            v.add("name", f"must be empty or {COLLECTION!r}, the one collection of operations")
        if request.filter:
            v.add("filter", "filters are not supported; leave it empty")
        scope: dict[str, str | int] = {"list": "operations", "caller": lister(principal)}
        cursor = v.page_token(self._tokens, request.page_token, scope)
        v.raise_if_any()
        page = _rendered_page(self._builder, tenant_id=tenant_scope(principal), cursor=cursor, size=size)
        operations, after = await self._store.query(page)
        return operations_pb2.ListOperationsResponse(
            operations=operations, next_page_token=self._tokens.next_token(after, scope)
        )

    async def DeleteOperation(self, request: operations_pb2.DeleteOperationRequest, context: Context) -> Empty:
        """Forget a finished operation; an unfinished one cannot be deleted."""
        operation_id = _checked_operation_id(request.name)
        await self._store.transact(partial(_delete_done, operation_id, tenant_id=tenant_scope(current_principal())))
        return Empty()

    async def CancelOperation(self, request: operations_pb2.CancelOperationRequest, context: Context) -> Empty:
        """A cancel-allocation operation is itself the cancel: it cannot be called off."""
        operation_id = _checked_operation_id(request.name)
        await self._store.query(repo.get_row(operation_id, tenant_id=tenant_scope(current_principal())))
        raise FailedPrecondition(
            reason="OPERATION_NOT_CANCELLABLE",
            message=f"{request.name} releases nodes and cannot be cancelled",
            metadata={"field": "name"},
        )


def _delete_done(operation_id: str, *, tenant_id: str | None) -> Tx[None]:
    row = yield from repo.get_row(operation_id, tenant_id=tenant_id)
    if not row.done:
        raise FailedPrecondition(
            reason="OPERATION_NOT_DONE",
            message=f"{repo.name_of(operation_id)} is still running; wait for it before deleting it",
            metadata={"field": "name"},
        )
    yield from repo.delete(operation_id)


def _rendered(
    builder: OperationBuilder, operation_id: str, *, tenant_id: str | None
) -> Tx[tuple[repo.Operation, operations_pb2.Operation]]:
    """The operation (NOT_FOUND as ``repo.get_row``) and its rendering, from one snapshot."""
    row = yield from repo.get_row(operation_id, tenant_id=tenant_id)
    return row, (yield from builder.build([row]))[0]


def _rendered_page(
    builder: OperationBuilder, *, tenant_id: str | None, cursor: Cursor | None, size: int
) -> Tx[tuple[list[operations_pb2.Operation], Cursor | None]]:
    """One page of operations rendered, and the cursor after it (None on the last page)."""
    rows = yield from repo.list_page(tenant_id=tenant_id, cursor=cursor, limit=size + 1)
    rows, after = cut_page(rows, size, lambda row: Cursor(row.created_us, row.operation_id))
    return (yield from builder.build(rows)), after

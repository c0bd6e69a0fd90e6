"""Waiting for operations to finish, for any number of waiters, at the cost of one reader.

A ``WaitOperation`` registers what it waits for here, reads it once (unless another waiter of
the same operation already has) and sleeps; it reads nothing more until it answers. One worker
(``run``) re-reads, in one statement, which of the watched operations are done, renders each
done one once and hands it to all of its waiters. It re-reads when this process completes
operations (the releaser's notifier) and every ``POLL_SECONDS`` for those another replica
completes; with nothing watched it reads nothing. So the database sees a read per change and
per poll, whatever the number of waiters: not one per waiter per tick.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog
from google.longrunning import operations_pb2

from services.notify import Notifier
from services.operations import repository as repo
from services.operations.builder import OperationBuilder
from services.store.engine import Database
from services.store.tx import Tx

log = structlog.get_logger(__name__)

# How long an operation completed by another replica can go unnoticed by this one's waiters.
POLL_SECONDS = 0.5

Finished = asyncio.Future[operations_pb2.Operation]


@dataclass(eq=False)
class Watched:
    """One operation being waited for, shared by all of its waiters."""

    # Resolved by the worker with the operation once it is done.
    finished: Finished
    # The operation as a waiter read it, not done, and its rendering: until it is done neither
    # changes (its metadata is the cancel's request, its state CANCELLING), so later waiters
    # answer from it instead of reading it again. The row's tenant decides who may see it.
    known: tuple[repo.Operation, operations_pb2.Operation] | None = None
    waiters: int = 0


class OperationWatch:
    """Tells waiters when their operations are done (see the module docstring); ``run`` is the
    worker, owned by the control plane, that reads for all of them."""

    def __init__(
        self, store: Database, builder: OperationBuilder, changed: Notifier, *, poll_seconds: float = POLL_SECONDS
    ) -> None:
        self._store = store
        self._builder = builder
        self._changed = changed
        self._poll_seconds = poll_seconds
        self._watched: dict[str, Watched] = {}

    @contextmanager
    def watching(self, operation_id: str) -> Iterator[Watched]:
        """The shared watch of ``operation_id``, for the block's duration. Enter it before reading
        the operation: a completion that lands after the read then reaches the waiter on the
        worker's next pass instead of being missed."""
        watched = self._watched.get(operation_id)
        if watched is None:
            watched = self._watched[operation_id] = Watched(asyncio.get_running_loop().create_future())
        watched.waiters += 1
        try:
            yield watched
        finally:
            watched.waiters -= 1
            if not watched.waiters:
                del self._watched[operation_id]
                watched.finished.cancel()  # a no-op once resolved; otherwise nobody awaits it

    async def run(self) -> None:
        """Re-read the watched operations on every change and poll, until cancelled; a failed
        read is logged and the next pass retries (waiters still answer by their deadlines)."""
        while True:
            seen = self._changed.generation
            if self._watched:
                try:
                    await self.check()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("operation_watch_failed")
            await self._changed.wait(seen, self._poll_seconds)

    async def check(self) -> None:
        """One pass: read which watched operations are done and hand each to its waiters."""
        pending = [operation_id for operation_id, w in self._watched.items() if not w.finished.done()]
        if not pending:
            return
        done = await self._store.query(self._done_among(pending))
        for row, operation in done:
            watched = self._watched.get(row.operation_id)
            # The same message goes to every waiter: handlers only serialize it.
            if watched is not None and not watched.finished.done():
                watched.finished.set_result(operation)

    def _done_among(self, operation_ids: list[str]) -> Tx[list[tuple[repo.Operation, operations_pb2.Operation]]]:
        """Those of ``operation_ids`` that are done, each with its rendering, from one snapshot."""
        rows = yield from repo.done_among(operation_ids)
        return list(zip(rows, (yield from self._builder.build(rows)), strict=True))

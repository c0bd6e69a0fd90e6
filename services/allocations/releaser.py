"""Finishes cancelled allocations: scrubs their nodes, releases them, completes the Operation.

Level-triggered: every pass re-reads which allocations are CANCELLING, so a restart, a missed
wake-up or a second replica never strands one. A node's scrub (GPU reset, disk wipe, removal
of tenant keys and fabric membership) is performed by its agent on a real fleet; until agents
report it, the control plane stands in for them and counts a scrub done ``scrub_seconds``
after the cancel was accepted.
"""

from __future__ import annotations

import asyncio

import structlog

from services.allocations import repository as repo
from services.allocations.commands import CANCEL_KIND
from services.allocations.states import AllocationState
from services.auth.principal import CONTROL_PLANE
from services.clock import now_us
from services.nodes import repository as nodes_repo
from services.nodes.transitions import NodeEvent
from services.notify import Notifier
from services.operations import repository as ops_repo
from services.store.engine import Store

log = structlog.get_logger(__name__)

POLL_SECONDS = 1.0


class Releaser:
    """Background worker owned by the control plane; ``run`` until cancelled."""

    def __init__(self, store: Store, *, scrub_seconds: float, wake: Notifier, done: Notifier) -> None:
        self._store = store
        self._scrub_us = int(scrub_seconds * 1_000_000)
        self._wake = wake
        self._done = done

    async def run(self) -> None:
        while True:
            try:
                next_due_us = await self.release_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A database hiccup must not kill the worker; the next pass retries.
                log.exception("releaser_pass_failed")
                next_due_us = None
            delay = POLL_SECONDS if next_due_us is None else max(0.0, (next_due_us - now_us()) / 1e6)
            await self._wake.wait(min(delay, POLL_SECONDS))

    async def release_due(self) -> int | None:
        """Release every allocation whose scrub is done; return when the next one is due."""
        async with self._store.read() as session:
            pending = await repo.ids_in_state(session, AllocationState.CANCELLING)
        next_due: int | None = None
        for allocation in pending:
            due = (allocation.cancel_us or 0) + self._scrub_us
            if due <= now_us():
                await self._release(allocation.allocation_id)
            else:
                next_due = due if next_due is None else min(next_due, due)
        return next_due

    async def _release(self, allocation_id: str) -> None:
        async with self._store.write() as session:
            row = await repo.get_row(session, allocation_id, tenant_id=None, for_update=True)
            if row.state != AllocationState.CANCELLING:
                return  # another replica finished it
            now = now_us()
            for assignment in await repo.live_assignments(session, allocation_id):
                node = await nodes_repo.get_row(session, assignment.node_id, for_update=True)
                event = NodeEvent.FINISH_SCRUB_DRAINED if node.drain_pending else NodeEvent.FINISH_SCRUB
                node.drain_pending = False
                await nodes_repo.apply(
                    session,
                    node,
                    event,
                    reason=f"scrubbed after {allocation_id}",
                    actor=CONTROL_PLANE.actor,
                    now_us=now,
                )
                assignment.released_us = now
                session.add(assignment)
            row.state = AllocationState.CANCELLED
            row.released_us = now
            session.add(row)
            operation = await ops_repo.for_target(session, CANCEL_KIND, allocation_id)
            if operation is not None:
                operation.done = True
                operation.done_us = now
                session.add(operation)
            await session.flush()
        log.info("allocation_released", allocation_id=allocation_id, tenant=row.tenant_id)
        self._done.notify()

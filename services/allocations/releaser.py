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
from services.nodes.transitions import NodeEvent, NodeState
from services.notify import Notifier
from services.operations import repository as ops_repo
from services.store.engine import Store
from services.usage import repository as usage
from services.usage.repository import Hold, UsageKind

log = structlog.get_logger(__name__)

POLL_SECONDS = 1.0
BATCH = 256
BATCH_WINDOW_SECONDS = 0.02


class Releaser:
    """Background worker owned by the control plane; ``run`` until cancelled."""

    def __init__(self, store: Store, *, scrub_seconds: float, wake: Notifier, done: Notifier) -> None:
        self._store = store
        self._scrub_us = int(scrub_seconds * 1_000_000)
        self._wake = wake
        self._done = done

    async def run(self) -> None:
        while True:
            seen = self._wake.generation
            try:
                next_due_us = await self.release_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A database hiccup must not kill the worker; the next pass retries.
                log.exception("releaser_pass_failed")
                next_due_us = None
            delay = POLL_SECONDS if next_due_us is None else max(0.0, (next_due_us - now_us()) / 1e6)
            await self._wake.wait(seen, min(delay, POLL_SECONDS))
            # Let cancels that arrive together be released together, in one transaction.
            await asyncio.sleep(BATCH_WINDOW_SECONDS)

    async def release_due(self) -> int | None:
        """Release every allocation whose scrub is done; return when the next one is due."""
        while True:
            async with self._store.read() as session:
                due = await repo.cancels_due(session, scrubbed_before_us=now_us() - self._scrub_us, limit=BATCH)
            if due:
                await self._release(due)
            if len(due) < BATCH:
                break
        async with self._store.read() as session:
            oldest = await repo.oldest_cancel_us(session)
        return None if oldest is None else oldest + self._scrub_us

    async def _release(self, allocation_ids: list[str]) -> None:
        """Release a batch with a fixed number of set-based statements in one transaction:
        under load, releases must not queue behind creates one write at a time, or capacity
        drains faster than it returns."""
        async with self._store.write() as session:
            now = now_us()
            # Another replica may have finished some of them since they were read.
            rows = await repo.lock_in_state(session, allocation_ids, AllocationState.CANCELLING)
            if not rows:
                return
            ids = [r.allocation_id for r in rows]
            by_id = {r.allocation_id: r for r in rows}
            held = await repo.held_nodes(session, ids)
            drained = await nodes_repo.drain_pending(session, [h.node_id for h in held])
            moves = [
                nodes_repo.Move(
                    h.node_id,
                    NodeState(h.node_state),
                    NodeEvent.FINISH_SCRUB_DRAINED if h.node_id in drained else NodeEvent.FINISH_SCRUB,
                    reason=f"scrubbed after {h.allocation_id}",
                )
                for h in held
            ]
            await nodes_repo.apply_many(session, moves, reason="scrubbed", actor=CONTROL_PLANE.actor, now_us=now)
            await repo.finish_cancel(session, ids, now_us=now)
            # Billing stops here, when the nodes are back: not at the cancel request.
            holds = [
                Hold(by_id[h.allocation_id].tenant_id, h.allocation_id, by_id[h.allocation_id].gpu_model, h.node_id)
                for h in held
            ]
            await usage.record(session, UsageKind.STOP, holds, at_us=now)
            await ops_repo.complete(session, CANCEL_KIND, ids, now_us=now)
        log.info("allocations_released", count=len(ids), allocation_ids=ids)
        self._done.notify()

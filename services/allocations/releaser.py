"""Finishes cancelled allocations: scrubs their nodes, releases them, completes the Operation.

The tenant's hold (its billing, its access to the nodes' metrics) ended when the cancel was
accepted (writes.record_cancels); the scrub and any outage before the release are the
provider's time, so a release writes no usage event of its own.

Level-triggered: every pass re-reads which allocations are CANCELLING, so a restart, a missed
wake-up or a second replica never strands one. A node's scrub (GPU reset, disk wipe, removal
of tenant keys and fabric membership) is performed by its agent on a real fleet; until agents
report it, the control plane stands in for them and counts a scrub done ``scrub_seconds``
after the cancel was accepted. A node its agent manages is left SCRUBBING when its allocation
is released: the node reconciler (services/fleet/) makes it READY once the agent confirms the
scrub.
"""

from __future__ import annotations

import asyncio
from functools import partial

import structlog

from services.allocations import gpu_holds
from services.allocations import repository as repo
from services.allocations.requests import CANCEL_KIND
from services.auth.principal import CONTROL_PLANE
from services.clock import now_us
from services.nodes import repository as nodes_repo
from services.nodes.transitions import NodeEvent, NodeState
from services.notify import Notifier
from services.operations import repository as ops_repo
from services.store.engine import Database
from services.store.tx import Deadlock, Tx

log = structlog.get_logger(__name__)

POLL_SECONDS = 1.0
# Allocations per release transaction. On SQLite its statements run on the event loop
# (store/writer.py): a smaller batch holds the loop for less time, and several small ones
# release as many allocations sooner than one large one, since smaller IN lists cost less per
# row (docs/performance.md).
BATCH = 64
BATCH_WINDOW_SECONDS = 0.02


class Releaser:
    """Background worker owned by the control plane; ``run`` until cancelled."""

    def __init__(
        self, store: Database, *, scrub_seconds: float, wake: Notifier, done: Notifier, freed: Notifier | None = None
    ) -> None:
        self._store = store
        self._scrub_us = int(scrub_seconds * 1_000_000)
        self._wake = wake
        self._done = done
        # Told when released nodes are back in their pools (the scheduler's wake-up).
        self._freed = freed

    async def run(self) -> None:
        """Release due allocations until cancelled, waiting between passes until the next scrub is due (at most
        ``POLL_SECONDS``) or a cancel wakes it; a failed pass is logged and retried."""
        woken = True  # the first pass writes: a start may find a backlog
        while True:
            seen = self._wake.generation
            try:
                next_due_us = await (self.release_due() if woken else self.poll())
            except asyncio.CancelledError:
                raise
            except Deadlock as error:
                # Chosen as PostgreSQL's victim: look again after the window.
                log.info("releaser_pass_aborted", error=str(error))
                next_due_us = now_us()
            except Exception:
                # A database hiccup must not kill the worker; the next pass retries.
                log.exception("releaser_pass_failed")
                next_due_us = None
            delay = POLL_SECONDS if next_due_us is None else max(0.0, (next_due_us - now_us()) / 1e6)
            await self._wake.wait(seen, min(delay, POLL_SECONDS))
            woken = self._wake.generation != seen
            # Let cancels that arrive together be released together, in one transaction.
            await asyncio.sleep(BATCH_WINDOW_SECONDS)

    async def poll(self) -> int | None:
        """A pass no cancel of this server asked for (a timer's: a scrub came due, or another
        replica accepted a cancel): read first, and write only when something is due, so that
        an idle fleet costs no write transaction (and on SQLite no commit) every second.
        Returns when the next scrub is due, like ``release_due``."""
        oldest = await self._store.query(repo.oldest_cancel_us())
        if oldest is None:
            return None
        if oldest + self._scrub_us > now_us():
            return oldest + self._scrub_us
        return await self.release_due()

    async def release_due(self) -> int | None:
        """Release every allocation whose scrub is done; return when the next one is due."""
        locking = self._store.dialect == "postgresql"
        while True:
            released, oldest = await self._store.transact(
                partial(release_batch, scrubbed_before_us=now_us() - self._scrub_us, limit=BATCH, locking=locking)
            )
            if released:
                log.info("allocations_released", count=len(released), allocation_ids=released)
                self._done.notify()
                if self._freed is not None:
                    self._freed.notify()
            if len(released) < BATCH:
                return None if oldest is None else oldest + self._scrub_us


def release_batch(*, scrubbed_before_us: int, limit: int, locking: bool) -> Tx[tuple[list[str], int | None]]:
    """Release up to ``limit`` allocations whose scrub is done, with a fixed number of
    set-based statements: under load, releases must not queue behind creates one at a time,
    or capacity drains faster than it returns.

    Returns the released ids and when the oldest allocation still CANCELLING was cancelled.
    """
    due = yield from repo.lock_cancels_due(scrubbed_before_us=scrubbed_before_us, limit=limit, locking=locking)
    if due:
        ids = due
        held = [h for h in (yield from repo.held_nodes(ids, locking=locking)) if not h.agent_managed]
        # Stamped once the nodes are locked: after anything that committed on them meanwhile
        # (an operator's drain), and before any create that takes them next.
        now = now_us()
        drained = yield from nodes_repo.drain_pending([h.node_id for h in held])
        moves = [
            nodes_repo.Move(
                h.node_id,
                NodeState(h.node_state),
                NodeEvent.FINISH_SCRUB_DRAINED if h.node_id in drained else NodeEvent.FINISH_SCRUB,
                reason=f"scrubbed after {h.allocation_id}",
            )
            for h in held
        ]
        yield from nodes_repo.apply_many(moves, reason="scrubbed", actor=CONTROL_PLANE.actor, now_us=now)
        yield from _release_shared(ids, now_us=now, locking=locking)
        yield from repo.finish_cancel(ids, now_us=now)
        yield from ops_repo.complete(CANCEL_KIND, ids, now_us=now)
    oldest = yield from repo.oldest_cancel_us()
    return due, oldest


def _release_shared(allocation_ids: list[str], *, now_us: int, locking: bool) -> Tx[None]:
    """End the holds of the part-node allocations among ``allocation_ids``: their GPUs waited
    for the scrub like nodes do. A shared node left with no hold is released to its scrub;
    one its agent does not manage is counted scrubbed with the GPUs (as above)."""
    emptied = yield from gpu_holds.release(allocation_ids, now_us=now_us, locking=locking)
    if not emptied:
        return
    yield from nodes_repo.apply_many(
        [
            nodes_repo.Move(e.node_id, e.node_state, NodeEvent.RELEASE, reason="its last part-node allocation ended")
            for e in emptied
        ],
        reason="",
        actor=CONTROL_PLANE.actor,
        now_us=now_us,
    )
    scrubbed = [e.node_id for e in emptied if not e.agent_managed]
    drained = yield from nodes_repo.drain_pending(scrubbed)
    moves = [
        nodes_repo.Move(
            node_id,
            NodeState.SCRUBBING,
            NodeEvent.FINISH_SCRUB_DRAINED if node_id in drained else NodeEvent.FINISH_SCRUB,
            reason="scrubbed after its last part-node allocation",
        )
        for node_id in scrubbed
    ]
    yield from nodes_repo.apply_many(moves, reason="scrubbed", actor=CONTROL_PLANE.actor, now_us=now_us)

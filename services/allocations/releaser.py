"""Finishes cancelled allocations: scrubs their nodes, releases them, completes the Operation;
and finishes the scrubs of nodes taken from an allocation (a replacement, a defragmentation move).

The tenant's hold (its billing, its access to the nodes' metrics) ended when the cancel was
accepted (writes.record_cancels); the scrub and any outage before the release are the
provider's time, so a release writes no usage event of its own.

Level-triggered: every pass re-reads which allocations are CANCELLING, so a restart, a missed
wake-up or a second replica never strands one. A node's scrub (GPU reset, disk wipe, removal
of tenant keys and fabric membership) is performed by its agent on a real fleet; until agents
report it, the control plane stands in for them and counts a scrub done ``scrub_seconds``
after the cancel was accepted. A node its agent manages is left SCRUBBING when its allocation
is released: the node reconciler (services/fleet/) makes it READY once the agent confirms the
scrub. A node taken from a live allocation no agent runs is counted scrubbed likewise,
``scrub_seconds`` after it was taken: READY again, or QUARANTINED when a drain waits for it.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Protocol

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


class Batch(Protocol):
    """A releaser step: finish up to ``limit`` scrubs done before ``scrubbed_before_us``; the
    ids finished, and when the oldest still going began."""

    def __call__(self, *, scrubbed_before_us: int, limit: int, locking: bool) -> Tx[tuple[list[str], int | None]]: ...


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
        replica accepted a cancel or took a node): read first, and write only what is due, so
        that an idle fleet costs no write transaction (and on SQLite no commit) every second.
        Returns when the next scrub is due, like ``release_due``."""
        cancelled, taken = await self._store.query(_oldest_scrubs_us())
        next_release = None if cancelled is None else cancelled + self._scrub_us
        if next_release is not None and next_release <= now_us():
            return await self.release_due()
        return _earliest(next_release, await self._finish_taken_scrubs(taken))

    async def release_due(self) -> int | None:
        """Release every allocation whose scrub is done, and finish the due scrubs of taken
        nodes; return when the next scrub is due."""
        next_release = await self._release_allocations()
        taken = await self._store.query(nodes_repo.oldest_taken_scrub_us())
        return _earliest(next_release, await self._finish_taken_scrubs(taken))

    async def _finish_taken_scrubs(self, oldest_us: int | None) -> int | None:
        """Finish the due scrubs of taken nodes, the oldest of which began at ``oldest_us`` (read
        first: a cancel's wake-up must not cost a second write transaction when, as nearly
        always, none is due); return when the next is due."""
        if oldest_us is None or oldest_us + self._scrub_us > now_us():
            return None if oldest_us is None else oldest_us + self._scrub_us
        return await self._in_batches(finish_taken_scrubs, "taken_nodes_scrubbed", self._freed)

    async def _release_allocations(self) -> int | None:
        return await self._in_batches(release_batch, "allocations_released", self._done, self._freed)

    async def _in_batches(self, step: Batch, event: str, *told: Notifier | None) -> int | None:
        """Run ``step`` on what is due, ``BATCH`` at a time, logging ``event`` and telling ``told``
        after each batch that did something; return when the next scrub is due."""
        locking = self._store.dialect == "postgresql"
        while True:
            done, oldest = await self._store.transact(
                partial(step, scrubbed_before_us=now_us() - self._scrub_us, limit=BATCH, locking=locking)
            )
            if done:
                log.info(event, count=len(done), ids=done)
                for notifier in told:
                    if notifier is not None:
                        notifier.notify()
            if len(done) < BATCH:
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
        scrubbed = [(h.node_id, NodeState(h.node_state), f"scrubbed after {h.allocation_id}") for h in held]
        yield from _finish_scrubs(scrubbed, now_us=now)
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
    why = "scrubbed after its last part-node allocation"
    scrubbed = [(e.node_id, NodeState.SCRUBBING, why) for e in emptied if not e.agent_managed]
    yield from _finish_scrubs(scrubbed, now_us=now_us)


def finish_taken_scrubs(*, scrubbed_before_us: int, limit: int, locking: bool) -> Tx[tuple[list[str], int | None]]:
    """Count done the scrubs of up to ``limit`` taken nodes no agent scrubs, begun at or before
    ``scrubbed_before_us``. Returns them and when the oldest such scrub still going began."""
    due = yield from nodes_repo.taken_scrubs_due(scrubbed_before_us=scrubbed_before_us, limit=limit, locking=locking)
    if due:
        why = "scrubbed after it was taken from its allocation"
        yield from _finish_scrubs([(node_id, NodeState.SCRUBBING, why) for node_id in due], now_us=now_us())
    oldest = yield from nodes_repo.oldest_taken_scrub_us()
    return due, oldest


def _finish_scrubs(scrubbed: list[tuple[str, NodeState, str]], *, now_us: int) -> Tx[None]:
    """Move each scrubbed (node, state, why) to READY, or out of service when a drain waits for it."""
    if not scrubbed:
        return
    drained = yield from nodes_repo.drain_pending([node_id for node_id, _, _ in scrubbed])
    moves = [
        nodes_repo.Move(
            node_id,
            state,
            NodeEvent.FINISH_SCRUB_DRAINED if node_id in drained else NodeEvent.FINISH_SCRUB,
            reason=why,
        )
        for node_id, state, why in scrubbed
    ]
    yield from nodes_repo.apply_many(moves, reason="scrubbed", actor=CONTROL_PLANE.actor, now_us=now_us)


def _oldest_scrubs_us() -> Tx[tuple[int | None, int | None]]:
    """When the oldest scrubs the releaser finishes began: a cancel's, and a taken node's."""
    cancelled = yield from repo.oldest_cancel_us()
    taken = yield from nodes_repo.oldest_taken_scrub_us()
    return cancelled, taken


def _earliest(*due_us: int | None) -> int | None:
    return min((t for t in due_us if t is not None), default=None)

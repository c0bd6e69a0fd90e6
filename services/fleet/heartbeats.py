"""Heartbeats: heard in memory, written to the database coarsely and in batches.

A heartbeat that changes nothing must cost no durable write, yet a replica that takes over the
reconciler, or one restarted, must not mistake a live fleet for a silent one. So each beat only
updates this replica's memory, and a node's ``last_heartbeat_us`` row is rewritten when what it
holds is ``persist_every_s`` old, by one batched statement every ``flush_s``. The row is then at
most ``persist_every_s + flush_s`` (plus one beat interval) behind the truth, which the
reconciler's unreachable threshold must exceed (services/fleet/config.py keeps them apart).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from services.clock import now_us
from services.fleet import repository as repo
from services.store.engine import Database

log = structlog.get_logger(__name__)


class Heartbeats:
    """This replica's record of when each node was last heard."""

    def __init__(
        self, store: Database, *, persist_every_s: float, flush_s: float, clock: Callable[[], int] = now_us
    ) -> None:
        self._store = store
        self._persist_every_us = round(persist_every_s * 1_000_000)
        self._flush_s = flush_s
        self._clock = clock
        self._heard: dict[str, int] = {}
        self._persisted: dict[str, int] = {}
        self._due: dict[str, int] = {}
        # For benchmarks and operators: beats heard, rows and statements written.
        self.beats = 0
        self.rows_written = 0
        self.flushes = 0

    def beat(self, node_id: str) -> None:
        """Record that ``node_id`` was heard now; costs no I/O."""
        at = self._clock()
        self.beats += 1
        self._heard[node_id] = at
        if at - self._persisted.get(node_id, 0) >= self._persist_every_us:
            self._due[node_id] = at

    def persisted(self, node_id: str, at_us: int) -> None:
        """Note that ``node_id``'s row already holds ``at_us`` (written by its registration)."""
        self._heard[node_id] = max(at_us, self._heard.get(node_id, 0))
        self._persisted[node_id] = at_us
        self._due.pop(node_id, None)

    def heard(self, node_id: str) -> int | None:
        """When this replica last heard ``node_id`` (wall clock, microseconds), if ever."""
        return self._heard.get(node_id)

    async def flush(self) -> int:
        """Write every row that is due in one transaction; the number written."""
        if not self._due:
            return 0
        due, self._due = self._due, {}
        try:
            await self._store.transact(lambda: repo.touch_heartbeats(sorted(due.items())))
        except BaseException:
            # Not written: due again next time (a newer beat meanwhile wins).
            for node_id, at in due.items():
                self._due[node_id] = max(at, self._due.get(node_id, 0))
            raise
        self._persisted.update(due)
        self.rows_written += len(due)
        self.flushes += 1
        return len(due)

    async def run(self) -> None:
        """Flush every ``flush_s`` until cancelled; a failed flush is logged and retried."""
        while True:
            await asyncio.sleep(self._flush_s)
            try:
                await self.flush()
            except Exception as error:
                log.warning("heartbeat_flush_failed", error=repr(error))

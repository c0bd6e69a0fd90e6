"""The degraded-allocation sweep: an allocation the health controller left short of a node, with
no spare free then, gets one once a node of its model frees up.

On the replica that leads the fleet, every ``interval_s`` one query lists the ACTIVE allocations
with a replacement still unfilled, and each is topped up in a transaction of its own
(replacement.top_up), which places the spare nearest the removed node and bills it from then.
Level-triggered: the sweep acts on what the tables hold, so a restart or a change of leader
loses nothing. A node that frees up goes to a waiting allocation within one interval; a create
may take it first, unless the pool's spares (spares.py) hold it back.
"""

from __future__ import annotations

import asyncio
from functools import partial

import structlog

from services.allocations import repository as repo
from services.allocations.replacement import top_up
from services.allocations.repository import Replacement
from services.store.engine import Database

log = structlog.get_logger(__name__)


class DegradedSweep:
    """Tops up degraded allocations every ``interval_s``; ``run`` until cancelled."""

    def __init__(self, store: Database, *, interval_s: float, actor: str) -> None:
        self._store = store
        self._interval_s = interval_s
        self._actor = actor

    async def run(self) -> None:
        """Sweep every interval until cancelled; a failed sweep is logged and the next one tries again."""
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("degraded_sweep_failed")

    async def sweep(self) -> dict[str, list[Replacement]]:
        """One sweep: each degraded allocation given what spares are free, oldest removal first,
        a spare a transaction; the replacements filled, by allocation. One that fails is logged
        and the sweep goes on to the next: one allocation never holds up the others."""
        locking = self._store.dialect == "postgresql"
        filled: dict[str, list[Replacement]] = {}
        for allocation_id in await self._store.query(repo.degraded()):
            try:
                while (
                    made := await self._store.transact(
                        partial(top_up, allocation_id, actor=self._actor, locking=locking)
                    )
                ) is not None:
                    filled.setdefault(allocation_id, []).append(made)
                    log.info(
                        "allocation_topped_up",
                        allocation_id=allocation_id,
                        spare=made.spare_node_id,
                        removed=made.removed_node_id,
                    )
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("allocation_top_up_failed", allocation_id=allocation_id)
        return filled

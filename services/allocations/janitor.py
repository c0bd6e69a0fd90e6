"""Forgets idempotency keys once their retention has passed.

A key answers retries of its request for at least ``idempotency.RETENTION_HOURS``; after that a
retry with the same ``request_id`` is a new request. Without pruning the table would grow by
one row per create forever.
"""

from __future__ import annotations

import asyncio
from functools import partial

import structlog

from services.allocations import repository as repo
from services.allocations.idempotency import RETENTION_HOURS
from services.clock import now_us
from services.store.engine import Database

log = structlog.get_logger(__name__)

INTERVAL_SECONDS = 600.0
# Keys deleted per transaction.
BATCH = 500
_RETENTION_US = RETENTION_HOURS * 3600 * 1_000_000


class KeyJanitor:
    """Background worker owned by the control plane; ``run`` until cancelled."""

    def __init__(self, store: Database, *, interval_seconds: float = INTERVAL_SECONDS) -> None:
        self._store = store
        self._interval = interval_seconds

    async def run(self) -> None:
        """Prune at once, then every ``interval_seconds``, until cancelled; a failed pass is logged and retried."""
        while True:
            try:
                await self.prune_expired()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A database hiccup must not kill the worker; the next pass retries.
                log.exception("idempotency_prune_failed")
            await asyncio.sleep(self._interval)

    async def prune_expired(self, *, at_us: int | None = None) -> int:
        """Delete every key older than the retention (as of ``at_us``, default now)."""
        before = (now_us() if at_us is None else at_us) - _RETENTION_US
        total = 0
        while True:
            deleted = await self._store.transact(
                partial(repo.prune_idempotency_keys, created_before_us=before, limit=BATCH)
            )
            total += deleted
            if deleted < BATCH:
                break
        if total:
            log.info("idempotency_keys_pruned", count=total)
        return total

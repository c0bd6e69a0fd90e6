"""The metrics store's housekeeping: a worker the control plane owns and cancels on stop.

Every pass seals the head's complete windows into segment files (so the write-ahead log stays
short and restarts replay little) and deletes segments past retention; every
``compact_every`` passes it also merges small segments.
"""

from __future__ import annotations

import asyncio

import structlog

from services.clock import now_us
from services.metrics.samples import SampleStore

log = structlog.get_logger(__name__)


class Maintenance:
    """Runs until cancelled; a failed pass is logged and the next one tries again."""

    def __init__(self, samples: SampleStore, *, interval_seconds: float, compact_every: int = 60) -> None:
        self._samples = samples
        self._interval = interval_seconds
        self._compact_every = max(1, compact_every)
        self.passes = 0

    async def run(self) -> None:
        """Run a pass every ``interval_seconds`` (the first after one interval) until cancelled."""
        while True:
            await asyncio.sleep(self._interval)
            await self.run_once()

    async def run_once(self, *, now_ms: int | None = None) -> None:
        """One pass as of ``now_ms`` (None: the server's clock); errors other than cancellation are
        logged, not raised."""
        self.passes += 1
        compact = self.passes % self._compact_every == 0
        try:
            report = await self._samples.maintain(now_us() // 1000 if now_ms is None else now_ms, compact=compact)
        except asyncio.CancelledError:
            raise
        except Exception:
            # A full disk or a corrupt segment must not kill the worker; the next pass retries.
            log.exception("metrics_maintenance_failed")
            return
        if report.deleted_files or report.compacted:
            log.info(
                "metrics_maintenance",
                deleted_files=report.deleted_files,
                bytes_freed=report.bytes_freed,
                compacted=report.compacted,
            )

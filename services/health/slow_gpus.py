"""The slow-GPU sweep: fleet-median outliers of the metrics store, counted as health strikes.

On the replica that leads the fleet, every ``slow_gpu_interval_s`` the sweep asks the metrics
store which busy GPUs' ``slow_gpu_field`` (the SM clock by default) averaged more than
``slow_gpu_k`` spreads below the median of their busy peers over the last
``slow_gpu_window_s`` (services/metrics/outliers.py), stores a ``slow_gpu`` strike for each,
and wakes the health controller for their nodes. Idle GPUs are listed by ``ListOutliers`` but
never struck: their clocks are power management's choice. The window is the interval by
default, so sweeps do not overlap and a dip counts in at most two of them; the policy
(policy.py) drains a GPU slow in three, not one that was slow once: a job that briefly lowered
its clocks is not a fault.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial

import structlog

from services.clock import now_us
from services.health import repository as repo
from services.health.config import HealthConfig
from services.health.policy import SLOW_GPU, Observation
from services.metrics.outliers import Outlier, PeerGroup
from services.metrics.selection import Window
from services.store.engine import Database

log = structlog.get_logger(__name__)

# (field, window, k) -> the peer groups judged and the outliers: Metrics.outliers.
FindOutliers = Callable[[str, Window, float], Awaitable[tuple[list[PeerGroup], list[Outlier]]]]


class SlowGpuSweep:
    """Turns fleet-median outliers into ``slow_gpu`` strikes; ``run`` until cancelled."""

    def __init__(
        self,
        store: Database,
        find: FindOutliers,
        config: HealthConfig,
        *,
        clock: Callable[[], int] = now_us,
    ) -> None:
        self._store = store
        self._find = find
        self._config = config
        self._clock = clock

    async def run(self, on_strike: Callable[[str], None]) -> None:
        """Sweep every interval until cancelled, calling ``on_strike`` for each node struck; a
        failed sweep is logged and the next one tries again."""
        while True:
            await asyncio.sleep(self._config.slow_gpu_interval_s)
            try:
                struck = await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("slow_gpu_sweep_failed")
                continue
            for node_id in struck:
                on_strike(node_id)

    async def sweep(self) -> list[str]:
        """One sweep: store a strike for every outlier now; the nodes struck, sorted."""
        config, now = self._config, self._clock()
        window = Window((now - round(config.slow_gpu_window_s * 1e6)) // 1000, now // 1000)
        _, found = await self._find(config.slow_gpu_field, window, config.slow_gpu_k)
        # Only busy GPUs: an idle GPU's clocks are power management's choice, not a fault.
        outliers = [outlier for outlier in found if outlier.figure.busy]
        by_node: dict[str, list[Observation]] = {}
        for outlier in outliers:
            gpu = outlier.figure
            by_node.setdefault(gpu.node_id, []).append(Observation(SLOW_GPU, now / 1e6, gpu.gpu_index))
        for node_id, strikes in sorted(by_node.items()):
            await self._store.transact(partial(repo.record, node_id, strikes))
        if by_node:
            log.warning("slow_gpus_found", field=config.slow_gpu_field, gpus=len(outliers), nodes=sorted(by_node))
        return sorted(by_node)

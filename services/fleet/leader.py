"""What the replica holding the ``node-reconciler`` lease runs: the reconciler's controller, the
health controller, the reachability sweep, the slow-GPU sweep, the degraded-allocation sweep and
the allocation scheduler, started afresh each time this replica becomes the leader."""

from __future__ import annotations

import asyncio

from services.allocations.degraded import DegradedSweep
from services.allocations.scheduler import Scheduler
from services.clock import now_us
from services.control.controller import Controller
from services.control.lease import LeaderElector, holder_id
from services.fleet.config import FleetConfig
from services.fleet.reachability import Reachability
from services.fleet.reconciler import NodeReconciler
from services.health.config import HealthConfig
from services.health.controller import NodeHealth
from services.health.slow_gpus import SlowGpuSweep
from services.store.engine import Database

LEASE_NAME = "node-reconciler"


class FleetLeader:
    """Runs the node reconciler while this replica holds the lease; ``notify`` queues a node."""

    def __init__(
        self,
        store: Database,
        reconciler: NodeReconciler,
        reachability: Reachability,
        config: FleetConfig,
        health: NodeHealth,
        health_config: HealthConfig,
        slow_gpus: SlowGpuSweep,
        degraded: DegradedSweep,
        scheduler: Scheduler,
    ) -> None:
        self._reconciler = reconciler
        self._reachability = reachability
        self._config = config
        self._health = health
        self._health_config = health_config
        self._slow_gpus = slow_gpus
        self._degraded = degraded
        self._scheduler = scheduler
        self._controller: Controller[str] | None = None
        self._health_controller: Controller[str] | None = None
        reachability.on_strike = self.notify_health
        self.elector = LeaderElector(
            store,
            LEASE_NAME,
            holder_id(),
            duration_s=config.lease_duration_s,
            renew_s=config.lease_renew_s,
            retry_s=config.lease_retry_s,
        )

    @property
    def controller(self) -> Controller[str] | None:
        """The controller of the current term; None while this replica does not lead."""
        return self._controller

    def notify(self, node_id: str, *, critical: bool = False) -> None:
        """Ask for a pass over ``node_id`` soon; nothing when this replica does not lead (the
        leader's resync finds the node)."""
        if self._controller is not None:
            self._controller.queue.add(node_id, critical=critical)

    def notify_health(self, node_id: str) -> None:
        """Ask the health controller to look at ``node_id`` (new strikes); nothing when this
        replica does not lead (the leader's resync finds the node)."""
        if self._health_controller is not None:
            self._health_controller.queue.add(node_id)

    async def run(self) -> None:
        """Lead whenever the lease can be had, until cancelled (a manager's loop)."""
        await self.elector.run(self._lead)

    async def _lead(self) -> None:
        config = self._config
        controller: Controller[str] = Controller(
            "node-reconciler",
            self._reconciler.reconcile,
            workers=config.workers,
            list_keys=self._reconciler.list_keys,
            resync_s=config.resync_s,
        )
        health: Controller[str] = Controller(
            "health",
            self._health.reconcile,
            # One worker: a pool's removals are counted and made one pass after another, so two
            # passes can never both find the last removal of the hour free.
            workers=1,
            list_keys=self._health.list_keys,
            resync_s=self._health_config.resync_s,
        )
        self._controller, self._health_controller = controller, health
        leading_since = now_us()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(controller.run(), name="node-reconciler")
                group.create_task(health.run(), name="health")
                group.create_task(self._reachability.run(leading_since_us=leading_since), name="reachability")
                group.create_task(self._slow_gpus.run(self.notify_health), name="slow-gpus")
                group.create_task(self._degraded.run(), name="degraded-allocations")
                group.create_task(self._scheduler.run(), name="scheduler")
        finally:
            self._controller = self._health_controller = None
            controller.shut_down()
            health.shut_down()

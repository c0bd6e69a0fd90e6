"""What the replica holding the ``node-reconciler`` lease runs: the reconciler's controller and
the reachability sweep, started afresh each time this replica becomes the leader."""

from __future__ import annotations

import asyncio

from services.clock import now_us
from services.control.controller import Controller
from services.control.lease import LeaderElector, holder_id
from services.fleet.config import FleetConfig
from services.fleet.reachability import Reachability
from services.fleet.reconciler import NodeReconciler
from services.store.engine import Database

LEASE_NAME = "node-reconciler"


class FleetLeader:
    """Runs the node reconciler while this replica holds the lease; ``notify`` queues a node."""

    def __init__(
        self, store: Database, reconciler: NodeReconciler, reachability: Reachability, config: FleetConfig
    ) -> None:
        self._reconciler = reconciler
        self._reachability = reachability
        self._config = config
        self._controller: Controller[str] | None = None
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
        self._controller = controller
        leading_since = now_us()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(controller.run(), name="node-reconciler")
                group.create_task(self._reachability.run(leading_since_us=leading_since), name="reachability")
        finally:
            self._controller = None
            controller.shut_down()

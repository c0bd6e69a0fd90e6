"""Unreachable nodes: marked after ``missed_beats`` silent intervals, cleared when heard again.

A node counts as heard at the later of this replica's memory and the row's
``last_heartbeat_us`` (written by whichever replica heard it: services/fleet/heartbeats.py).
Each outage is one UNREACHABLE event and one REACHABLE event, whatever the number of sweeps in
between: the flag is flipped by a guarded UPDATE, and only a flip records an event.

A replica that has led for less than the threshold marks nothing: its memory is younger than
the silence it would judge, and the rows may be old because the whole control plane was down,
not the node. It clears marks from the start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

import structlog

from services.auth.principal import CONTROL_PLANE
from services.clock import now_us
from services.fleet import repository as repo
from services.fleet.config import FleetConfig
from services.fleet.directives import Directives
from services.fleet.heartbeats import Heartbeats
from services.fleet.repository import NodeRecord
from services.health import repository as health_repo
from services.health.policy import MISSED_HEARTBEATS, Observation
from services.nodes import repository as nodes_repo
from services.nodes.transitions import NodeEvent
from services.store.engine import Database
from services.store.tx import Tx

log = structlog.get_logger(__name__)


class Reachability:
    """Sweeps the fleet for silent nodes and for nodes heard again."""

    def __init__(
        self,
        store: Database,
        heartbeats: Heartbeats,
        directives: Directives,
        config: FleetConfig,
        *,
        clock: Callable[[], int] = now_us,
    ) -> None:
        self._store = store
        self._heartbeats = heartbeats
        self._directives = directives
        self._config = config
        self._clock = clock
        # Marks made by this replica, over its life: the benchmark's count of false marks.
        self.marked = 0
        # Told of each node marked (a strike for the health policy): the fleet leader wakes its
        # health controller for it.
        self.on_strike: Callable[[str], None] = lambda node_id: None

    def _heard(self, node_id: str, recorded_us: int | None) -> int:
        return max(recorded_us or 0, self._heartbeats.heard(node_id) or 0)

    async def sweep(self, *, leading_since_us: int) -> None:
        """Mark the silent nodes and clear the ones heard again."""
        now = self._clock()
        threshold_us = round(self._config.unreachable_after_s * 1_000_000)
        cutoff = now - threshold_us
        for node_id, recorded in await self._store.query(repo.heard_before(cutoff, unreachable=True)):
            heard = self._heard(node_id, recorded)
            if heard >= cutoff:
                ago = (now - heard) / 1e6
                await self._flip(node_id, False, f"heard again {ago:.1f} s ago")
        if now - leading_since_us < threshold_us:
            return
        for node_id, recorded in await self._store.query(repo.heard_before(cutoff, unreachable=False)):
            heard = self._heard(node_id, recorded)
            if heard < cutoff:
                silent_s = (now - heard) / 1e6 if heard else float("inf")
                interval = self._config.heartbeat_interval_s
                why = f"no heartbeat for {silent_s:.1f} s: {self._config.missed_beats} beats of {interval:g} s missed"
                if await self._flip(node_id, True, why):
                    self.marked += 1

    async def _flip(self, node_id: str, unreachable: bool, reason: str) -> bool:
        record = await self._store.transact(partial(_flip, node_id, unreachable, reason))
        if record is None:
            return False
        self._directives.put(record)
        if unreachable:
            self.on_strike(node_id)
        log.warning("node_unreachable" if unreachable else "node_reachable", node_id=node_id, reason=reason)
        return True

    async def run(self, *, leading_since_us: int) -> None:
        """Sweep every half heartbeat interval until cancelled; a failed sweep is logged."""
        while True:
            await asyncio.sleep(self._config.heartbeat_interval_s / 2)
            try:
                await self.sweep(leading_since_us=leading_since_us)
            except Exception as error:
                log.warning("reachability_sweep_failed", error=repr(error))


def _flip(node_id: str, unreachable: bool, reason: str) -> Tx[NodeRecord | None]:
    if not (yield from repo.set_unreachable(node_id, unreachable)):
        return None
    row = yield from nodes_repo.get_row(node_id)
    event = NodeEvent.UNREACHABLE if unreachable else NodeEvent.REACHABLE
    at = now_us()
    yield from nodes_repo.record_event(row, event, reason=reason, actor=CONTROL_PLANE.actor, now_us=at)
    if unreachable:
        # An outage is a strike for the health policy (services/health): a node that keeps
        # going silent is drained even though it comes back each time.
        yield from health_repo.record(node_id, [Observation(MISSED_HEARTBEATS, at / 1e6)])
    return (yield from repo.record(node_id))

"""The health controller: turns a node's strikes into the policy's decision, and applies it.

Level-triggered, on the replica that leads the fleet (services/fleet/leader.py): a pass over a
node reads its strikes within the policy's longest window, asks ``decide`` (policy.py) for the
most severe action that fired, and acts on the difference between that and what it has done
already:

- nothing fired, or the decision is settled (a ``DRAIN`` or ``HEALTH`` event of the controller's
  since the node's latest strike): nothing;
- NOTIFY_TENANT: a ``HEALTH`` event with the evidence (the signal, the strikes, the window, the
  rule), which ``gpucloud nodes events`` shows; the node stays in service;
- any removal (drain after the job, drain now, quarantine, repair, RMA): a ``DRAIN`` with the
  evidence as its reason, through the node transition table: a free node leaves service at
  once; a held one, after the job, drains while its tenant keeps it; for DRAIN_NOW and worse
  it is taken from its tenant's allocation at once and a spare takes its place
  (services/allocations/replacement.py), in the same transaction;
- a removal past the pool's or the leaf switch's safety limit (config.py), or in a pool an operator paused
  (``SetHealthAutomation``): not applied, a ``HEALTH_HELD`` event once per strike saying why
  (an error log past the limit), and the node is looked at again later.

Every move runs in a transaction that first checks the node is still in the state the pass
read, so a pass racing an operator or the reconciler changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import structlog

from services.allocations import replacement
from services.allocations.repository import Replacement
from services.auth.principal import CONTROL_PLANE
from services.clock import now_us
from services.control.controller import Outcome
from services.health import repository as repo
from services.health.config import HealthConfig
from services.health.policy import LONGEST_WINDOW_S, Action, Decision, decide
from services.health.repository import NodeHealthView
from services.nodes import commands as node_commands
from services.nodes import repository as nodes_repo
from services.nodes.transitions import NodeEvent, NodeState
from services.store.engine import Database
from services.store.tx import Tx

log = structlog.get_logger(__name__)

ACTOR = CONTROL_PLANE.actor
HOUR_US = 3_600_000_000


class NodeHealth:
    """Decides and applies one node's health per call; see the module docstring."""

    def __init__(self, store: Database, config: HealthConfig, *, clock: Callable[[], int] = now_us) -> None:
        self._store = store
        self._config = config
        self._clock = clock

    async def list_keys(self) -> list[str]:
        """The in-service nodes with a strike within the policy's longest window."""
        return await self._store.query(repo.struck_since(self._clock() - round(LONGEST_WINDOW_S * 1e6)))

    async def reconcile(self, node_id: str) -> Outcome:
        """One level-triggered pass over ``node_id``."""
        now = self._clock()
        seen = await self._store.query(repo.view(node_id, since_us=now - round(LONGEST_WINDOW_S * 1e6), actor=ACTOR))
        if seen is None or seen.state in repo.OUT_OF_SERVICE or not seen.strikes:
            return Outcome()
        decision = decide(seen.strikes, now / 1e6)
        latest_us = round(seen.strikes[-1].at_s * 1e6)
        if decision is None or (seen.settled_us is not None and seen.settled_us >= latest_us):
            return Outcome()
        if seen.state is NodeState.DRAINING and decision.action < Action.DRAIN_NOW:
            return Outcome()  # draining already: only a fault that cannot wait changes anything
        if decision.action <= Action.NOTIFY_TENANT:
            await self._record(seen, NodeEvent.HEALTH, decision.evidence)
            return Outcome()
        pool = await self._store.query(repo.pool(seen.gpu_model, seen.leaf_switch, since_us=now - HOUR_US, actor=ACTOR))
        limit = self._config.removal_limit(pool.size)
        if pool.automation.paused:
            paused = pool.automation
            why = f"automation of the {seen.gpu_model} pool paused by {paused.actor}: {paused.reason or 'no reason'}"
            return await self._hold(seen, decision, why, latest_us, loud=False)
        if pool.drained >= limit:
            why = (
                f"{pool.drained} of the {seen.gpu_model} pool removed in the last hour, limit {limit}:"
                " that many at once looks like a monitoring or control-plane fault"
            )
            return await self._hold(seen, decision, why, latest_us, loud=True)
        if pool.leaf_drained >= self._config.removals_per_leaf_hour:
            limit = self._config.removals_per_leaf_hour
            why = (
                f"{pool.leaf_drained} under leaf switch {seen.leaf_switch} removed in the last hour, limit {limit}:"
                " that many under one switch looks like the switch or its cabling"
            )
            return await self._hold(seen, decision, why, latest_us, loud=True)
        locking = self._store.dialect == "postgresql"
        fault_us = round(decision.at_s * 1e6)
        moved = await self._store.transact(partial(_drain, seen, decision, locking=locking, fault_us=fault_us))
        if moved is None:
            return Outcome(requeue_after_s=0.0)  # moved meanwhile: look at what it is now
        state, replaced = moved
        log.warning(
            "health_drained",
            node_id=node_id,
            action=decision.action.name,
            signal=decision.rule.signal,
            strikes=decision.strikes,
            state=state.value,
        )
        if replaced is not None:
            log.warning(
                "health_replaced",
                node_id=node_id,
                spare_node_id=replaced.spare_node_id,
                degraded=replaced.spare_node_id is None,
            )
        return Outcome()

    async def _hold(self, seen: NodeHealthView, decision: Decision, why: str, latest_us: int, *, loud: bool) -> Outcome:
        """Record once per strike that the removal ``decision`` asks for is held back, and why,
        and ask for another pass later. ``loud``: past the safety limit, logged as an error."""
        if seen.held_us is None or seen.held_us < latest_us:
            await self._record(seen, NodeEvent.HEALTH_HELD, f"held: {decision.evidence}; {why}")
            if loud:
                log.error("health_removals_held", node_id=seen.node_id, gpu_model=seen.gpu_model, why=why)
            else:
                log.warning("health_removal_paused", node_id=seen.node_id, gpu_model=seen.gpu_model)
        return Outcome(requeue_after_s=self._config.held_retry_s)

    async def _record(self, seen: NodeHealthView, event: NodeEvent, reason: str) -> None:
        await self._store.transact(partial(_record, seen, event, reason))


def _still(seen: NodeHealthView, *, locking: bool = False) -> Tx[nodes_repo.Node | None]:
    """The node's row if it is still in the state ``seen`` read (locked when ``locking``), else None."""
    row = yield from nodes_repo.find(seen.node_id, locking=locking)
    return row if row is not None and NodeState(row.state) is seen.state else None


def _drain(
    seen: NodeHealthView, decision: Decision, *, locking: bool, fault_us: int
) -> Tx[tuple[NodeState, Replacement | None] | None]:
    """DRAIN the node if it is still as ``seen``, and for DRAIN_NOW and worse take it from its
    allocation with a spare in its place, billed until ``fault_us`` (the fault: the decision's
    last strike counted); its new state and the replacement made, or None (nothing written).

    On PostgreSQL the allocation holding the node is locked before the node, the order a
    cancel and the releaser lock them in: the other order deadlocked with a cancel."""
    if locking and decision.action >= Action.DRAIN_NOW:
        yield from replacement.lock_holder(seen.node_id)
    row = yield from _still(seen, locking=locking)
    if row is None:
        return None
    moved = yield from node_commands.drain(row, decision.evidence, actor=ACTOR)
    replaced = None
    if decision.action >= Action.DRAIN_NOW and NodeState(moved.state) is NodeState.DRAINING:
        replaced = yield from replacement.replace(
            moved, decision.evidence, actor=ACTOR, locking=locking, fault_us=fault_us
        )
        if replaced is not None:
            moved = yield from nodes_repo.get_row(seen.node_id)
    return NodeState(moved.state), replaced


def _record(seen: NodeHealthView, event: NodeEvent, reason: str) -> Tx[None]:
    row = yield from _still(seen)
    if row is not None:
        yield from nodes_repo.record_event(row, event, reason=reason, actor=ACTOR, now_us=now_us())

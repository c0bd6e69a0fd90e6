"""The node reconciler: moves agent-managed nodes through the lifecycle from what agents report.

Level-triggered: ``reconcile(node_id)`` reads the node and its agent's results and acts on the
difference between what the node's state asks for and what has been reported; the event that
queued the key (a report, a resync, a timer) plays no part. Every move is made in a transaction
that first checks the node is still in the state (and the attempt) the pass read, so a pass
racing an operator or a second pass changes nothing.

What each state waits for, and what ends the wait:

- REGISTERED: nothing; START_BURN_IN.
- BURN_IN: the agent's figures; PASS_BURN_IN, or FAIL_BURN_IN when a figure is too far under
  the fleet median of the node's model. Timeout: FAIL_BURN_IN.
- SCRUBBING: the agent's confirmation of GPU reset, disk wipe and key removal; FINISH_SCRUB
  (FINISH_SCRUB_DRAINED when a drain waits), or FAIL_SCRUB for a partial one. Timeout: FAIL_SCRUB.
- DRAINING: the tenant's release (the releaser moves the node). Timeout: DRAIN_OVERDUE,
  recorded once; the node stays with its tenant.

It runs only on the replica holding the ``node-reconciler`` lease (services/fleet/leader.py).
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from services.auth.principal import CONTROL_PLANE
from services.clock import now_us
from services.control.controller import Outcome
from services.fleet import repository as repo
from services.fleet.actions import SCRUB_STEPS
from services.fleet.burn_in import BurnInFigures, fleet_median, judge
from services.fleet.config import FleetConfig
from services.fleet.directives import Directives
from services.fleet.repository import NodeRecord, ResultRecord
from services.nodes import repository as nodes_repo
from services.nodes.transitions import NodeEvent, NodeState
from services.store.engine import Database
from services.store.tx import Tx

log = structlog.get_logger(__name__)

# How long a model's burn-in median is reused before it is read again.
MEDIAN_MAX_AGE_S = 1.0
# The median is of the model's latest results, this many at most: a reference as robust as the
# whole fleet's, at a cost that does not grow with it (reading every result of a 10,000-node
# fleet each second held the event loop longer as the fleet grew).
MEDIAN_SAMPLE = 1000
# How soon a burn-in waiting for a quorum of results looks again.
QUORUM_WAIT_S = 1.0


@functools.lru_cache(maxsize=2 * MEDIAN_SAMPLE)
def _figures(result_json: str) -> BurnInFigures:
    """A burn-in result's figures. Cached: the median reads the model's latest results every
    second, and decoding the same 1,000 again each time took 2% of a converging server's loop."""
    return BurnInFigures(**json.loads(result_json))


@dataclass(frozen=True, slots=True)
class _Median:
    figures: BurnInFigures | None
    sample: int
    fleet: int
    read_at: float


class NodeReconciler:
    """Reconciles one node per call; see the module docstring."""

    def __init__(
        self, store: Database, directives: Directives, config: FleetConfig, *, clock: Callable[[], int] = now_us
    ) -> None:
        self._store = store
        self._directives = directives
        self._config = config
        self._clock = clock
        self._locking = store.dialect == "postgresql"
        self._medians: dict[str, _Median] = {}
        # One read of a model's median at a time: the workers that need it meanwhile share it.
        self._median_reads: dict[str, asyncio.Lock] = {}

    async def list_keys(self) -> list[str]:
        """The nodes a resync looks at: those with something to act on (a result reported, a
        timeout passed), whatever event about them was missed. One query, however many
        nodes wait: a resync of every node in burn-in would read each one every few seconds."""
        config, now = self._config, self._clock()
        timeouts = {
            NodeState.BURN_IN: config.burn_in_timeout_s,
            NodeState.SCRUBBING: config.scrub_timeout_s,
            NodeState.DRAINING: config.drain_timeout_s,
        }
        cutoffs = {state: now - round(seconds * 1_000_000) for state, seconds in timeouts.items()}
        return await self._store.query(repo.actionable(cutoffs))

    async def reconcile(self, node_id: str) -> Outcome:
        """One level-triggered pass over ``node_id``."""
        record, result = await self._store.query(repo.observed(node_id))
        if record is None or not record.agent_managed:
            return Outcome()
        self._directives.put(record)
        if record.state is NodeState.REGISTERED:
            return await self._move(record, NodeEvent.START_BURN_IN, "the agent registered the node")
        if record.state is NodeState.BURN_IN:
            return await self._burn_in(record, result)
        if record.state is NodeState.SCRUBBING:
            return await self._scrub(record, result)
        if record.state is NodeState.DRAINING:
            return await self._drain(record)
        return Outcome()

    def _elapsed_s(self, record: NodeRecord) -> float:
        return max(0.0, (self._clock() - record.state_changed_us) / 1e6)

    async def _result_or_wait(
        self, record: NodeRecord, result: ResultRecord | None, timeout: float, failure: NodeEvent, waited_for: str
    ) -> ResultRecord | Outcome:
        """The agent's result of the node's current attempt; else, before ``timeout``, when to
        look again, and at it, the node failed by ``failure`` with the time waited."""
        if result is not None:
            return result
        elapsed = self._elapsed_s(record)
        if elapsed < timeout:
            return Outcome(requeue_after_s=timeout - elapsed)
        why = f"{waited_for} timed out: nothing from the agent after {elapsed:.0f} s (timeout {timeout:.0f} s)"
        return await self._move(record, failure, why)

    async def _burn_in(self, record: NodeRecord, reported: ResultRecord | None) -> Outcome:
        timeout = self._config.burn_in_timeout_s
        result = await self._result_or_wait(record, reported, timeout, NodeEvent.FAIL_BURN_IN, "burn-in")
        if isinstance(result, Outcome):
            return result
        if result.error:
            return await self._move(record, NodeEvent.FAIL_BURN_IN, f"burn-in could not run: {result.error}")
        figures = _figures(result.result_json)
        median = await self._median(record.gpu_model)
        if median.figures is None or median.sample < min(self._config.burn_in_quorum, median.fleet):
            # Too few of the model have reported for a median to mean anything yet.
            return Outcome(requeue_after_s=QUORUM_WAIT_S)
        tolerance = self._config.burn_in_tolerance
        verdict = judge(figures, median.figures, tolerance=tolerance, sample=median.sample, model=record.gpu_model)
        event = NodeEvent.PASS_BURN_IN if verdict.passed else NodeEvent.FAIL_BURN_IN
        return await self._move(record, event, verdict.evidence)

    def _usable(self, median: _Median | None) -> bool:
        """Whether ``median`` is recent, and rests on a quorum of results."""
        return (
            median is not None
            and time.monotonic() - median.read_at < MEDIAN_MAX_AGE_S
            and median.sample >= min(self._config.burn_in_quorum, median.fleet)
        )

    async def _median(self, gpu_model: str) -> _Median:
        async with self._median_reads.setdefault(gpu_model, asyncio.Lock()):
            cached = self._medians.get(gpu_model)
            if cached is not None and self._usable(cached):
                return cached
            quorum = self._config.burn_in_quorum

            def read() -> Tx[tuple[list[str], int]]:
                results = yield from repo.burn_in_results(gpu_model, most=MEDIAN_SAMPLE)
                # The fleet's size matters only while there are fewer results than the quorum.
                fleet = quorum if len(results) >= quorum else (yield from repo.fleet_size(gpu_model))
                return results, fleet

            read_at = time.monotonic()
            results, fleet = await self._store.query(read())
            figures = [_figures(r) for r in results]
            median = _Median(fleet_median(figures) if figures else None, len(figures), fleet, read_at)
            self._medians[gpu_model] = median
            return median

    async def _scrub(self, record: NodeRecord, reported: ResultRecord | None) -> Outcome:
        timeout = self._config.scrub_timeout_s
        result = await self._result_or_wait(record, reported, timeout, NodeEvent.FAIL_SCRUB, "scrub")
        if isinstance(result, Outcome):
            return result
        if result.error:
            return await self._move(record, NodeEvent.FAIL_SCRUB, f"scrub failed on the agent: {result.error}")
        report = json.loads(result.result_json)
        missing = [step for step in SCRUB_STEPS if not report.get(step)]
        if missing:
            why = f"scrub not confirmed: the agent did not confirm {', '.join(missing)}"
            return await self._move(record, NodeEvent.FAIL_SCRUB, why)
        return await self._move(record, NodeEvent.FINISH_SCRUB, "the agent confirmed " + ", ".join(SCRUB_STEPS))

    async def _drain(self, record: NodeRecord) -> Outcome:
        elapsed, timeout = self._elapsed_s(record), self._config.drain_timeout_s
        if elapsed < timeout:
            return Outcome(requeue_after_s=timeout - elapsed)
        why = f"drain overdue: the tenant has held the node {elapsed:.0f} s since the drain (timeout {timeout:.0f} s)"
        await self._store.transact(functools.partial(_record_once, record, NodeEvent.DRAIN_OVERDUE, why))
        return Outcome()

    async def _move(self, record: NodeRecord, event: NodeEvent, reason: str) -> Outcome:
        moved = await self._store.transact(functools.partial(_move, record, event, reason, locking=self._locking))
        if moved is None:
            return Outcome(requeue_after_s=0.0)  # moved meanwhile: look at what it is now
        self._directives.put(moved)
        log.info("node_reconciled", node_id=record.node_id, node_event=event.value, state=moved.state.value)
        # A state that waits for something (REGISTERED -> BURN_IN waits for a burn-in) is
        # looked at again, to start its timer; one that waits for nothing is done with.
        return Outcome(requeue_after_s=0.0) if moved.state in repo.IN_PROGRESS else Outcome()


def _move(record: NodeRecord, event: NodeEvent, reason: str, *, locking: bool) -> Tx[NodeRecord | None]:
    """Apply ``event`` if the node is still in the state and attempt ``record`` read; the
    node's new record, or None when it had moved meanwhile (nothing written)."""
    now = yield from repo.record(record.node_id, locking=locking)
    if now is None or (now.state, now.state_changed_us) != (record.state, record.state_changed_us):
        return None
    if event is NodeEvent.FINISH_SCRUB and (yield from nodes_repo.drain_pending([record.node_id])):
        event = NodeEvent.FINISH_SCRUB_DRAINED
    row = yield from nodes_repo.get_row(record.node_id)
    yield from nodes_repo.apply(row, event, reason=reason, actor=CONTROL_PLANE.actor, now_us=now_us())
    return (yield from repo.record(record.node_id))


def _record_once(record: NodeRecord, event: NodeEvent, reason: str) -> Tx[None]:
    """Record ``event`` in the node's history unless it is there already for this attempt."""
    if (yield from repo.recorded_since(record.node_id, event.value, record.state_changed_us)):
        return
    row = yield from nodes_repo.get_row(record.node_id)
    if (row.state, row.state_changed_us) == (record.state.value, record.state_changed_us):
        yield from nodes_repo.record_event(row, event, reason=reason, actor=CONTROL_PLANE.actor, now_us=now_us())

"""The scheduling cycle: admits PENDING allocations when their whole gang fits.

A create places at once when its model's queue holds nothing at least as high in priority and
its nodes are free (commands.py); otherwise it is recorded PENDING, holding nothing. On the
replica that leads the fleet (fleet/leader.py), ``Scheduler.run`` then runs a cycle per model
with a queue whenever a create queues, a cancel or a release frees capacity, and at least every
``interval_s`` (a node that turns READY after burn-in, a repair or an uncordon is seen there):
one transaction reads the queue in admission order, the pool of free nodes and the spares,
lets ``queue.plan`` decide (quotas counted, quotas.py), cancels the allocations a reclaim
preempts, as a cancel of theirs would, and admits what it chose, each allocation billed from
its admission. Level-triggered: a cycle acts on what the tables hold, so a restart or a change of
leader loses nothing.

On PostgreSQL the cycle locks the queue's rows, so a cancel of one waits for the cycle that may
admit it, and then the nodes it chose, passing over rows others hold; a node passed over or
taken meanwhile fails the cycle, which runs again at once on what is left. Nodes are also
row-locked briefly by work that takes none (a heartbeat flush, a health pass), so the last
attempt waits for the locks instead of passing over them, as a create's placement does.
"""

from __future__ import annotations

import asyncio
from functools import partial

import structlog

import scheduling
from services.allocations import gpu_holds, queue, quotas, spares
from services.allocations import repository as repo
from services.allocations.part_node import SharedNodes
from services.allocations.placement import DEFAULT_POLICIES, Candidate, Policies, Pool
from services.allocations.queue import Plan, Reason
from services.allocations.repository import Allocation, AllocationView
from services.allocations.states import AllocationState
from services.allocations.writes import PendingCancel, record_admissions, record_cancels
from services.auth.principal import CONTROL_PLANE
from services.clock import now_us
from services.errors import Aborted
from services.ids import new_id
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel
from services.nodes.transitions import NodeState
from services.notify import Notifier
from services.store.engine import Database
from services.store.tx import Tx

log = structlog.get_logger(__name__)

# The most further models an allocation may accept (the API's bound).
MAX_OTHER_MODELS = 4
# The actor of the node events an admission writes.
SCHEDULER_ACTOR = "control-plane:scheduler"
# Cycles of one model that lose a chosen node to a concurrent create before the pass gives up
# until the next wake-up (PostgreSQL only).
_ATTEMPTS = 5


class Scheduler:
    """Runs scheduling cycles on the fleet's leader; ``wake`` asks for one soon."""

    def __init__(
        self,
        store: Database,
        policies: Policies = DEFAULT_POLICIES,
        *,
        interval_s: float = 1.0,
        preempted: Notifier | None = None,
    ) -> None:
        self._store = store
        self._policies = policies
        self._interval_s = interval_s
        # Told when a cycle cancelled allocations for a reclaim (the releaser's wake-up).
        self._preempted = preempted
        self.wake = Notifier()

    async def run(self) -> None:
        """Run a pass whenever woken, and at least every ``interval_s``, until cancelled; a
        failed pass is logged and the next one tries again."""
        while True:
            seen = self.wake.generation
            try:
                await self.run_pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduling_pass_failed")
            await self.wake.wait(seen, self._interval_s)

    async def run_pass(self) -> dict[str, Plan]:
        """A cycle for every model with a queue; the plans made, by model (the last round's).
        A model whose cycle fails is logged and left to the next pass: it never holds up the
        others.

        Allocations that accept other models are offered them in rounds: in round k every
        model's cycle sees the allocations it is the k-th choice of, or an earlier one, so
        each is placed on the first model of its preference order with room for it."""
        plans: dict[str, Plan] = {}
        models, rounds = await self._store.query(repo.queued_models())
        for choice in range(rounds + 1):
            for model in models:
                try:
                    plans[model] = await self._cycle(GpuModel(model), choice)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("scheduling_cycle_failed", gpu_model=model)
        return plans

    async def _cycle(self, gpu_model: GpuModel, choice: int) -> Plan:
        locking = self._store.dialect == "postgresql"
        policy = self._policies.of(gpu_model.value)
        for attempt in range(1, _ATTEMPTS + 1):
            last = attempt == _ATTEMPTS
            try:
                made = await self._store.transact(
                    partial(cycle, gpu_model, policy, locking=locking, wait=last, choice=choice)
                )
            except (Aborted, VictimChanged):
                if last:
                    raise
                continue
            if made.preempted:
                log.info(
                    "allocations_preempted",
                    gpu_model=gpu_model.value,
                    allocation_ids=[row.allocation_id for row, _ in made.preempted],
                )
                if self._preempted is not None:
                    self._preempted.notify()
            if made.admitted or made.parts:
                log.info(
                    "allocations_admitted",
                    gpu_model=gpu_model.value,
                    allocation_ids=[row.allocation_id for row, _ in made.admitted]
                    + [p.row.allocation_id for p in made.parts],
                    waiting=len(made.waiting),
                )
            return made
        raise AssertionError("unreachable")


def cycle(
    gpu_model: GpuModel, policy: scheduling.Policy, *, locking: bool, wait: bool = False, choice: int = MAX_OTHER_MODELS
) -> Tx[Plan]:
    """One scheduling cycle over ``gpu_model``'s queue, with the allocations of other models
    it is at most the ``choice``-th further choice of: admit what ``queue.plan`` chose.
    ABORTED (NODE_CHANGED_CONCURRENTLY) when a chosen node was taken meanwhile or, unless
    ``wait`` (for the locks), is locked by another transaction (PostgreSQL)."""
    queued = yield from repo.queue(gpu_model.value, locking=locking)
    queued = [row for row in queued if row.gpu_model == gpu_model or row.alternatives.index(gpu_model) < choice]
    if not queued:
        return Plan([], {})
    made = yield from plan_model(gpu_model, queued, policy, locking=locking)
    if made.preempted:
        yield from _preempt(made.preempted, locking=locking)
    if not made.admitted and not made.parts:
        return made
    if locking:
        chosen = [node for _, nodes in made.admitted for node in nodes]
        opened = [p.node_id for p in made.parts if p.opened]
        chosen += opened
        # A node opened in this cycle is still READY: locked as a free node, not as a shared one.
        shared = sorted({p.node_id for p in made.parts if not p.opened} - set(opened))
        locked = yield from nodes_repo.lock_free(chosen, skip_locked=not wait)
        locked |= yield from nodes_repo.lock_free(shared, skip_locked=not wait, state=NodeState.ALLOCATED)
        if len(locked) != len(chosen) + len(shared):
            raise Aborted(
                reason="NODE_CHANGED_CONCURRENTLY",
                message="a node the scheduling cycle chose was taken meanwhile; the cycle runs again",
                metadata={"node_ids": ",".join(sorted({*chosen, *shared} - locked))},
            )
    # Stamped once the chosen nodes are locked: after whatever committed on them before.
    yield from record_admissions(made.admitted, made.parts, now_us=now_us(), actor=SCHEDULER_ACTOR)
    return made


class VictimChanged(Exception):
    """An allocation a reclaim chose to preempt was cancelled meanwhile (PostgreSQL): the cycle
    runs again on what the tables hold now. Never answered to a call."""


def _preempt(victims: list[tuple[Allocation, str]], *, locking: bool) -> Tx[None]:
    """Cancel the victims of a reclaim, each told why: as a cancel of theirs would (writes.record_cancels),
    their usage stopping now. ``VictimChanged`` when one is no longer ACTIVE."""
    rows = []
    for victim, _ in sorted(victims, key=lambda v: v[0].allocation_id):
        # Locked as a cancel locks it, before its nodes: a tenant's cancel of it waits here.
        row = yield from repo.get_row(victim.allocation_id, tenant_id=None, locking=locking)
        if row.state != AllocationState.ACTIVE.value:
            raise VictimChanged(row.allocation_id)
        rows.append(row)
    ids = [row.allocation_id for row in rows]
    held = yield from repo.held_nodes(ids, locking=locking)
    cancels = [(PendingCancel(CONTROL_PLANE, row.allocation_id, new_id("op")), row) for row in rows]
    yield from record_cancels(cancels, held, now_us=now_us())
    yield from repo.mark_preempted([(victim.allocation_id, reason) for victim, reason in victims])


def explain(
    allocation_id: str, *, tenant_id: str | None, policies: Policies
) -> Tx[tuple[AllocationView, list[Reason]]]:
    """The allocation and, while it is PENDING, why: the reasons the next cycle would give,
    most binding first. NOT_FOUND as for reading it."""
    view = yield from repo.get_view(allocation_id, tenant_id=tenant_id)
    row = view.row
    if row.state != AllocationState.PENDING.value:
        return view, []
    reasons: list[Reason] = []
    for model in (row.gpu_model, *row.alternatives):
        queued = yield from repo.queue(model)
        made = yield from plan_model(GpuModel(model), queued, policies.of(model), locking=False)
        waits = made.waiting.get(allocation_id)
        if not waits:
            # Admitted by the plan (or by a cycle since the read): the next cycle admits it.
            return view, [queue.due(row)]
        reasons += waits
    # Its first choice's reasons first, then each other model's in its order of preference.
    return view, reasons


def plan_model(gpu_model: GpuModel, queued: list[Allocation], policy: scheduling.Policy, *, locking: bool) -> Tx[Plan]:
    """``queue.plan`` over ``queued`` (PENDING allocations of ``gpu_model`` in admission
    order) and the model's pool, spares, quotas and shared nodes as the tables hold them."""
    keep = yield from spares.reserve(gpu_model, locking=locking)
    pool = Pool(map(Candidate._make, (yield from nodes_repo.free_nodes(gpu_model))))
    fleet_nodes, fleet_block = yield from nodes_repo.in_service(gpu_model)
    ledger = yield from quotas.ledger(gpu_model.value, locking=locking)
    shared = None
    if any(row.part_node for row in queued):
        shared = SharedNodes(gpu_model, *(yield from gpu_holds.shared(gpu_model)))
    running: list[Allocation] = []
    reclaiming = 0
    if ledger is not None:
        # Read only for a model with quotas: most fleets' cycles skip both.
        running = yield from repo.running(gpu_model.value)
        reclaiming = yield from repo.reclaiming(gpu_model.value)
    return queue.plan(
        queued,
        pool,
        policy=policy,
        keep=keep,
        fleet_nodes=fleet_nodes,
        fleet_block=fleet_block,
        ledger=ledger,
        running=running,
        reclaiming=reclaiming,
        shared=shared,
        gpu_model=gpu_model.value,
    )

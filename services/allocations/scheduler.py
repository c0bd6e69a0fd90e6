"""The scheduling pass: the one place where allocations are placed, on both databases.

Every create and every cancel waits for a pass. On the replica that leads the fleet
(fleet/leader.py), ``Scheduler.run`` runs one whenever a request arrives or a release frees
capacity, and at least every ``interval_s`` (a node that turns READY after burn-in, a repair
or an uncordon is seen there). A pass:

1. takes in, in one transaction, everything that arrived since the last pass (intake.py): new
   creates are recorded PENDING, cancels are accepted;
2. runs a cycle per model with a queue (those it expects queued right behind the intake, so
   that on SQLite one group commit covers them all): one transaction reads the queue in
   admission order, the pool of free nodes, the spares, the quotas and the shared nodes, lets
   ``queue.plan`` decide, cancels the allocations a reclaim preempts (as a cancel of theirs
   would), admits what it chose, each allocation billed from its admission, and withdraws the
   creates that asked not to wait (``fail_if_unavailable``) and fit in no model they accept;
3. answers every caller: a create ACTIVE when admitted, PENDING while it waits, refused
   when withdrawn.

So a burst of creates is placed by one plan in one transaction, in the queue's order, by the
rule that also explains why the rest wait; there is no second placement path to keep in step.
Level-triggered: a cycle acts on what the tables hold, so a restart or a change of leader loses
nothing. A replica that does not lead takes its requests in alone and leaves placing them to
the leader (``Scheduler._follow``).

On PostgreSQL the cycle locks the queue's rows, so a cancel of one waits for the cycle that may
admit it, and then the nodes it chose, passing over rows others hold; a node passed over or
taken meanwhile fails the cycle, which runs again at once on what is left. Nodes are also
row-locked briefly by work that takes none (a heartbeat flush, a health pass), so the last
attempt waits for the locks instead of passing over them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import structlog

import scheduling
from services.allocations import gpu_holds, idempotency, queue, quotas, spares
from services.allocations import repository as repo
from services.allocations.intake import Accepted, Cancelled, accept, answer
from services.allocations.part_node import SharedNodes
from services.allocations.placement import DEFAULT_POLICIES, Candidate, Policies, Pool
from services.allocations.queue import Plan, Reason, ReasonKind
from services.allocations.repository import Allocation, AllocationView
from services.allocations.requests import CREATE_METHOD, AllocationRequest, Created
from services.allocations.states import AllocationState
from services.allocations.writes import PendingCancel, PendingCreate, record_admissions, record_cancels
from services.auth.principal import CONTROL_PLANE
from services.clock import now_us
from services.errors import Aborted, ApiError, ResourceExhausted, Unavailable
from services.ids import new_id
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel
from services.nodes.transitions import NodeState
from services.notify import Notifier
from services.store.engine import Database
from services.store.tx import Conflict, Deadlock, Tx

log = structlog.get_logger(__name__)

_PENDING = AllocationState.PENDING.value
_NOBODY: Mapping[str, str] = {}
_NO_PLANS: Mapping[str, Plan] = {}
Item = TypeVar("Item")
Outcome = TypeVar("Outcome")
# How often a replica that does not lead looks whether the leader's cycle admitted a create,
# and how long past the leader's tick it waits for that.
_FOLLOW_POLL_S = 0.05
_FOLLOW_MARGIN_S = 0.25
# The most further models an allocation may accept (the API's bound).
MAX_OTHER_MODELS = 4
# The actor of the node events an admission writes.
SCHEDULER_ACTOR = "control-plane:scheduler"
# Attempts of one of a pass's transactions (its intake, a model's cycle) that lose a race to
# another transaction (PostgreSQL only) before the pass gives up on it.
_ATTEMPTS = 5


class Scheduler:
    """Takes in creates and cancels and runs scheduling passes on the fleet's leader; ``wake``
    asks for a pass soon.

    ``create`` and ``cancel`` answer once a pass has taken the request in (and, for a create,
    planned it). While this replica leads, they wait for the next pass of ``run``, which takes
    everything that arrived since the last one together. A replica that does not lead takes a
    request in alone and leaves placing it to the leader (``_follow``). Without ``run`` at all
    (a script, a test), ``admit`` runs a pass of the caller's own."""

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
        self._locking = store.dialect == "postgresql"
        # Told when a cycle cancelled allocations for a reclaim (the releaser's wake-up).
        self._preempted = preempted
        self.wake = Notifier()
        # Requests waiting for the next pass; None while this replica's ``run`` is not running.
        self._waiting: _Waiting | None = None
        # The models with a queue when a pass last read them: a pass with requests expects
        # these, and its creates' models, to need a cycle.
        self._queued_models: frozenset[str] = frozenset()

    @property
    def leading(self) -> bool:
        """Whether ``run`` is running here: requests wait for its passes."""
        return self._waiting is not None

    async def create(self, pending: PendingCreate) -> Created:
        """The create taken in and planned: ACTIVE when admitted, PENDING while it waits.
        RESOURCE_EXHAUSTED (INSUFFICIENT_CAPACITY, QUOTA_EXCEEDED) when it asked not to wait
        and was not admitted: the cycle withdrew it, and nothing was allocated. The intake's
        errors (intake.py) are raised."""
        if self._waiting is not None:
            with contextlib.suppress(_NotLeading):
                return answer(await self._next_pass(self._waiting.creates, pending))
        return await self._follow(pending)

    async def cancel(self, pending: PendingCancel) -> Cancelled:
        """The cancel accepted (intake.py): its Operation and the allocation as it is now."""
        if self._waiting is not None:
            with contextlib.suppress(_NotLeading):
                return answer(await self._next_pass(self._waiting.cancels, pending))
        return answer((await self._accept([], [pending])).cancels[0])

    def _next_pass(self, waiting: list[tuple[Item, asyncio.Future[Outcome]]], item: Item) -> asyncio.Future[Outcome]:
        """Queue ``item`` for the next pass, which is asked for now; its outcome, once the pass
        has run, or ``_NotLeading`` should this replica stop leading first."""
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        waiting.append((item, future))
        self.wake.notify()
        return future

    async def run(self) -> None:
        """While this replica leads: run a pass whenever woken (a request arrived, capacity
        freed), and at least every ``interval_s``, until cancelled; a failed pass is logged and
        the next one tries again. A pass under way when cancelled runs to its end, so everyone
        it took in gets an answer; whoever waits for a later one is sent to ``_follow``."""
        self._waiting = _Waiting([], [])
        try:
            while True:
                seen = self.wake.generation
                taken, self._waiting = self._waiting, _Waiting([], [])
                running = asyncio.create_task(self._answer_pass(taken), name="scheduling-pass")
                try:
                    await asyncio.shield(running)
                except asyncio.CancelledError:
                    # Owned to its end, however many cancels arrive meanwhile.
                    while not running.done():
                        with contextlib.suppress(asyncio.CancelledError):
                            await asyncio.wait({running})
                    raise
                await self.wake.wait(seen, self._interval_s)
        finally:
            left, self._waiting = self._waiting, None
            for future in left.futures():
                _settle(future, error=_NotLeading())

    async def _answer_pass(self, taken: _Waiting) -> None:
        """One pass over what was taken (but requests whose callers stopped waiting), each
        caller answered, whatever happens."""
        creates = [(p, f) for p, f in taken.creates if not f.done()]
        cancels = [(p, f) for p, f in taken.cancels if not f.done()]
        try:
            created, cancelled = await self.admit([p for p, _ in creates], [p for p, _ in cancels])
            for (_, future), create_outcome in zip(creates, created, strict=True):
                _settle(future, create_outcome)
            for (_, answered), cancel_outcome in zip(cancels, cancelled, strict=True):
                _settle(answered, cancel_outcome)
        except Exception as error:
            log.exception("scheduling_pass_failed")
            for future in taken.futures():
                _settle(future, error=error)

    async def admit(
        self, creates: Sequence[PendingCreate] = (), cancels: Sequence[PendingCancel] = ()
    ) -> tuple[list[Created | ApiError], list[Cancelled | ApiError]]:
        """A pass: take ``creates`` and ``cancels`` in (one transaction), run a cycle for every
        model with a queue, and answer each request, in order: a new create as the cycles left
        it, or refused if it asked not to wait and a cycle withdrew it. Once the intake has
        committed, a failure later in the pass is logged and its creates answered PENDING."""
        # Admitted in this pass, a new allocation's nodes name who asked for it, not the scheduler.
        asked_by = {c.allocation_id: c.request.actor or f"tenant:{c.request.tenant_id}" for c in creates}
        nothing = _TakenIn(Accepted([], [], []))
        taken = await self._take_in(creates, cancels, asked_by) if creates or cancels else nothing
        accepted = taken.accepted
        views: dict[str, AllocationView] = {}
        try:
            waiting, refused = await self.run_pass(asked_by, queued=accepted.queued, done=taken.done)
            if accepted.recorded:
                views = await self._store.query(repo.views_by_id(accepted.recorded))
            # Withdrawn by another's pass (standalone passes may run side by side): refused too.
            recorded = set(accepted.recorded)
            for row in (c.view.row for c in accepted.creates if isinstance(c, Created)):
                if row.allocation_id in recorded - views.keys() - refused:
                    waiting[row.allocation_id] = await self._store.query(reasons_for(row, self._policies))
                    refused.add(row.allocation_id)
        except Exception:
            # What was taken in is recorded: its callers hear of it as it was taken in.
            log.exception("scheduling_cycles_failed")
            waiting, refused = {}, set()
        asked = {create.allocation_id: create.request for create in creates}
        answers: list[Created | ApiError] = []
        for outcome in accepted.creates:
            # A new allocation as the cycle left it (so is a replay of one in the same pass).
            if isinstance(outcome, Created):
                allocation_id = outcome.view.row.allocation_id
                if allocation_id in refused:
                    outcome = _refusal(asked[allocation_id], waiting.get(allocation_id, []))
                elif allocation_id in views:
                    outcome = Created(views[allocation_id], outcome.replayed)
            answers.append(outcome)
        return answers, accepted.cancels

    async def _take_in(
        self, creates: Sequence[PendingCreate], cancels: Sequence[PendingCancel], asked_by: Mapping[str, str]
    ) -> _TakenIn:
        """The intake's transaction with, queued right behind it, a cycle of each model the
        pass expects a queue in (first choices only: ``run_pass``'s first round): the models
        with a queue at the last read and those the creates ask for first. Each cycle sees the
        intake; on SQLite one group commit covers them all. A cycle that failed is left to
        ``run_pass``, as is every one when the intake lost a race (taken in again by
        ``_accept``)."""
        expected = sorted(self._queued_models | {c.request.gpu_model for c in creates})
        intake, *cycles = await self._store.transact_in_order(
            [
                partial(accept, creates, cancels, locking=self._locking, queued=True),
                *(self._cycle_of(GpuModel(model), 0, asked_by) for model in expected),
            ]
        )
        done = {model: made for model, made in zip(expected, cycles, strict=True) if isinstance(made, Plan)}
        for model, made in done.items():
            self._made(GpuModel(model), made)
        if isinstance(intake, Conflict):
            # The cycles ran without the requests: those run again once they are taken in.
            return _TakenIn(await self._accept(creates, cancels))
        if isinstance(intake, BaseException):
            raise intake
        assert isinstance(intake, Accepted)
        return _TakenIn(intake, done)

    async def _accept(self, creates: Sequence[PendingCreate], cancels: Sequence[PendingCancel]) -> Accepted:
        """The intake's transaction, run again when it lost a race to another replica's (a
        key claimed meanwhile, a deadlock). When it lost every time each request is ABORTED:
        a keyed create with IDEMPOTENCY_KEY_IN_USE when the last loss was a key, the others
        with PLACEMENT_CONTENDED."""
        lost: Conflict | None = None
        for _ in range(_ATTEMPTS):
            try:
                return await self._store.transact(partial(accept, creates, cancels, locking=self._locking))
            except Conflict as error:
                lost = error
        contended = Aborted(
            reason="PLACEMENT_CONTENDED",
            message=f"taking the request in lost {_ATTEMPTS} races to concurrent requests; retry",
            metadata={},
        )
        key_lost = not isinstance(lost, Deadlock)
        return Accepted(
            [
                idempotency.in_use(c.request.request_id) if key_lost and c.request.request_id else contended
                for c in creates
            ],
            [contended for _ in cancels],
            [],
        )

    async def _follow(self, pending: PendingCreate) -> Created:
        """A create on a replica that does not lead: taken in alone, then placed by the
        leader's next cycle, which this waits for up to ``interval_s`` (the leader's tick) and
        a little more. One that asked not to wait is refused when the leader's cycle withdrew
        it, with the reasons a cycle gives now; when no cycle decided in time it is withdrawn
        here and UNAVAILABLE, since no scheduler answered."""
        created = answer((await self._accept([pending], [])).creates[0])
        undecided = created.view.row.state == _PENDING and created.view.row.fail_if_unavailable
        if created.replayed and not undecided:
            return created
        # A replay of one still undecided waits for the cycle too: it may yet be withdrawn.
        allocation_id = created.view.row.allocation_id
        deadline = asyncio.get_running_loop().time() + self._interval_s + _FOLLOW_MARGIN_S
        view: AllocationView | None = created.view
        while view is not None and view.row.state == _PENDING and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(_FOLLOW_POLL_S)
            view = (await self._store.query(repo.views_by_id([allocation_id]))).get(allocation_id)
        if view is None:  # withdrawn by the leader's cycle
            reasons = await self._store.query(reasons_for(created.view.row, self._policies))
            raise _refusal(pending.request, reasons)
        if view.row.state != _PENDING or not view.row.fail_if_unavailable:
            return Created(view, created.replayed)
        withdrawn = await self._store.transact(
            partial(repo.withdraw, [allocation_id], key_method=CREATE_METHOD, locking=self._locking)
        )
        if allocation_id not in withdrawn:  # decided meanwhile
            return Created(await self._store.query(repo.get_view(allocation_id, tenant_id=None)), created.replayed)
        raise Unavailable(
            reason="NO_SCHEDULER",
            message=f"no scheduling pass decided the create within {self._interval_s + _FOLLOW_MARGIN_S:g} s"
            " (no replica leads the fleet now); nothing was allocated; retry",
            metadata={"gpu_model": pending.request.gpu_model},
        )

    async def run_pass(
        self,
        asked_by: Mapping[str, str] = _NOBODY,
        *,
        queued: tuple[list[str], int] | None = None,
        done: Mapping[str, Plan] = _NO_PLANS,
    ) -> tuple[dict[str, list[Reason]], set[str]]:
        """A cycle for every model with a queue: why each allocation left waiting waits, its
        first choice's reasons first, and which allocations were refused and withdrawn. A
        model whose cycle fails is logged and left to the next pass: it never holds up the
        others. ``asked_by``: who asked for allocations taken in by this pass, by id;
        ``queued``: the models with a queue as the intake read them (read here when None);
        ``done``: the first-round cycles made already (``_take_in``), by model.

        Allocations that accept other models are offered them in rounds: in round k every
        model's cycle sees the allocations it is the k-th choice of, or an earlier one, so
        each is placed on the first model of its preference order with room for it."""
        waiting: dict[str, list[Reason]] = {}
        refused: set[str] = set()
        models, rounds = queued if queued is not None else await self._store.query(repo.queued_models())
        self._queued_models = frozenset(models)
        for choice in range(rounds + 1):
            for model in sorted({*models, *done}) if choice == 0 else models:
                try:
                    made = done.get(model) if choice == 0 else None
                    if made is None:
                        made = await self._cycle(GpuModel(model), choice, asked_by)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("scheduling_cycle_failed", gpu_model=model)
                    continue
                for allocation_id, reasons in made.waiting.items():
                    waiting.setdefault(allocation_id, reasons)
                refused.update(made.refused)
        return waiting, refused

    def _cycle_of(
        self,
        gpu_model: GpuModel,
        choice: int,
        asked_by: Mapping[str, str],
        *,
        wait: bool = False,
        passed_over: frozenset[str] = frozenset(),
    ) -> Callable[[], Tx[Plan]]:
        """The transaction of one cycle of ``gpu_model`` (``cycle``), as the store runs it."""
        return partial(
            cycle,
            gpu_model,
            self._policies.of(gpu_model.value),
            locking=self._locking,
            wait=wait,
            choice=choice,
            passed_over=passed_over,
            asked_by=asked_by,
        )

    async def _cycle(self, gpu_model: GpuModel, choice: int, asked_by: Mapping[str, str]) -> Plan:
        # Nodes another transaction held or took: the next attempt plans without them, as if
        # they were not free, rather than choosing them again.
        passed_over: set[str] = set()
        for attempt in range(1, _ATTEMPTS + 1):
            last = attempt == _ATTEMPTS
            try:
                made = await self._store.transact(
                    self._cycle_of(gpu_model, choice, asked_by, wait=last, passed_over=frozenset(passed_over))
                )
            except (Aborted, VictimChanged, Conflict) as error:
                if last:
                    raise
                if isinstance(error, Aborted):
                    passed_over.update(node for node in error.metadata.get("node_ids", "").split(",") if node)
                continue
            self._made(gpu_model, made)
            return made
        raise AssertionError("unreachable")

    def _made(self, gpu_model: GpuModel, made: Plan) -> None:
        """Log what a cycle decided, and wake the releaser for the allocations it preempted."""
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


def cycle(
    gpu_model: GpuModel,
    policy: scheduling.Policy,
    *,
    locking: bool,
    wait: bool = False,
    choice: int = MAX_OTHER_MODELS,
    passed_over: frozenset[str] = frozenset(),
    asked_by: Mapping[str, str] = _NOBODY,
) -> Tx[Plan]:
    """One scheduling cycle over ``gpu_model``'s queue, with the allocations of other models
    it is at most the ``choice``-th further choice of: admit what ``queue.plan`` chose, on
    nodes other than ``passed_over``, each node's event naming who asked for its allocation
    where ``asked_by`` knows (the pass that took the create in), else the scheduler.
    ABORTED (NODE_CHANGED_CONCURRENTLY, naming the nodes) when a chosen node was taken
    meanwhile or, unless ``wait`` (for the locks), is locked by another transaction
    (PostgreSQL)."""
    queued = yield from repo.queue(gpu_model.value, locking=locking)
    queued = [row for row in queued if row.gpu_model == gpu_model or row.alternatives.index(gpu_model) < choice]
    if not queued:
        return Plan([], {})
    made = yield from plan_model(gpu_model, queued, policy, locking=locking, passed_over=passed_over)
    if made.preempted:
        yield from _preempt(made.preempted, locking=locking)
    if made.refused:
        # Asked not to wait, and no model it accepts has room: it never was (the caller is
        # refused), and nothing holds its place or its key.
        yield from repo.withdraw(made.refused, key_method=CREATE_METHOD, locking=locking)
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
    now = now_us()
    yield from record_admissions(made.admitted, made.parts, now_us=now, actor=SCHEDULER_ACTOR, asked_by=asked_by)
    return made


@dataclass(frozen=True, slots=True)
class _TakenIn:
    """What a pass's intake answered, and the plans of the cycles queued behind it, by model."""

    accepted: Accepted
    done: dict[str, Plan] = field(default_factory=dict)


class _NotLeading(Exception):
    """This replica stopped leading before a pass took the request in: nothing of it was
    written, and the caller takes it in as a replica that does not lead. Never answered."""


@dataclass(slots=True)
class _Waiting:
    """Requests waiting for the leader's next pass, each with the future its caller awaits."""

    creates: list[tuple[PendingCreate, asyncio.Future[Created | ApiError]]]
    cancels: list[tuple[PendingCancel, asyncio.Future[Cancelled | ApiError]]]

    def futures(self) -> list[asyncio.Future[Any]]:
        """Every caller's future."""
        return [future for _, future in self.creates] + [future for _, future in self.cancels]


def _settle(future: asyncio.Future[Any], result: object = None, *, error: Exception | None = None) -> None:
    """Answer a caller, unless it stopped waiting (its call cancelled: a deadline, a client gone)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _refusal(request: AllocationRequest, reasons: Sequence[Reason]) -> ResourceExhausted:
    """The refusal of a create that asked not to wait and was not admitted: the first reason
    the cycle gave (its first choice's) as the message, its kind and figures as metadata."""
    first = reasons[0] if reasons else Reason(ReasonKind.WAITING_FOR_CAPACITY, "the scheduling cycle did not admit it")
    reason: str = "INSUFFICIENT_CAPACITY"
    if first.kind is ReasonKind.QUOTA_EXCEEDED:
        reason = "QUOTA_EXCEEDED"
    return ResourceExhausted(
        reason=reason,
        message=f"{first.message}; nothing was allocated (fail_if_unavailable)",
        metadata={
            "gpu_model": request.gpu_model,
            "reason": first.kind.value,
            **{name: str(value) for name, value in first.figures.items()},
        },
    )


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
    if view.row.state != AllocationState.PENDING.value:
        return view, []
    return view, (yield from reasons_for(view.row, policies))


def reasons_for(row: Allocation, policies: Policies) -> Tx[list[Reason]]:
    """Why the PENDING ``row`` would wait in the next cycle, at its place in each of its
    models' queues (it need not be recorded: a create withdrawn meanwhile is planned as it
    was): its first choice's reasons first, then each other model's in its order of
    preference; ADMISSION_DUE when some model's plan admits it."""
    reasons: list[Reason] = []
    for model in (row.gpu_model, *row.alternatives):
        queued = [q for q in (yield from repo.queue(model)) if q.allocation_id != row.allocation_id]
        place = sum(1 for q in queued if (-q.priority, q.created_us, q.allocation_id) < _queue_key(row))
        queued.insert(place, row)
        made = yield from plan_model(GpuModel(model), queued, policies.of(model), locking=False)
        waits = made.waiting.get(row.allocation_id)
        if not waits:
            # Admitted by the plan (or by a cycle since the read): the next cycle admits it.
            return [queue.due(row)]
        reasons += waits
    return reasons


def _queue_key(row: Allocation) -> tuple[int, int, str]:
    """Where ``row`` stands in its queue's order (repository.queue's): priority, then age."""
    return -row.priority, row.created_us, row.allocation_id


def plan_model(
    gpu_model: GpuModel,
    queued: list[Allocation],
    policy: scheduling.Policy,
    *,
    locking: bool,
    passed_over: frozenset[str] = frozenset(),
) -> Tx[Plan]:
    """``queue.plan`` over ``queued`` (PENDING allocations of ``gpu_model`` in admission
    order) and the model's pool, spares, quotas and shared nodes as the tables hold them,
    but for the nodes ``passed_over``."""
    keep = yield from spares.reserve(gpu_model, locking=locking)
    free = map(Candidate._make, (yield from nodes_repo.free_nodes(gpu_model)))
    pool = Pool(c for c in free if c.node_id not in passed_over)
    fleet_nodes, fleet_block = yield from nodes_repo.in_service(gpu_model)
    ledger = yield from quotas.ledger(gpu_model.value, locking=locking)
    shared = None
    if any(row.part_node for row in queued):
        nodes, holds = yield from gpu_holds.shared(gpu_model)
        shared = SharedNodes(
            gpu_model,
            (n for n in nodes if n.node_id not in passed_over),
            (h for h in holds if h.node_id not in passed_over),
        )
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

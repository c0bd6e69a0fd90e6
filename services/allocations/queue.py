"""The admission rule of a model's queue, and why each allocation left in it waits. No I/O.

A scheduling cycle (scheduler.py) hands ``plan`` the PENDING allocations of one GPU model in
admission order (priority, then age), the model's pool of free nodes, and how many nodes of the
model the fleet has at all. ``plan`` walks the queue once:

- An allocation asking for more nodes than the fleet has of its model can never be admitted
  as the fleet stands (NO_ACCEPTABLE_MODEL), nor can one asking for more under one leaf
  switch (``same_block``) than any leaf switch has (TOPOLOGY). It is passed over and holds
  nothing back.
- Otherwise, while nothing ahead of it is blocked, the pool's policy places it whole or not at
  all. Placed, its nodes leave the pool before the next one chooses.
- The first that does not fit blocks the queue: it reserves every free node of the pool until
  it fits (WAITING_FOR_CAPACITY; TOPOLOGY when enough are free but no leaf switch has them all
  for a ``same_block`` gang), and everything behind it waits too (BEHIND_GANGS). Smaller
  work may run ahead of a waiting gang only where it cannot delay the gang's earliest start;
  allocations declare no run time, so no start can be predicted, and every free node of the
  pool may be the one the gang needs. Other pools' queues are not held up.

An allocation that asked not to wait (``fail_if_unavailable``) is placed if it fits at its
place and otherwise neither blocks the queue nor reclaims quota: once no model it accepts is
left, ``plan`` refuses it (``Plan.refused``), and the cycle withdraws it.

Quotas (quotas.py) are counted on the way, part-node work by its GPUs: an allocation over its
tenant's quota waits (QUOTA_EXCEEDED) and is passed over, holding nothing back, since one
tenant's quota must not hold up the others. A head that fits within its tenant's own quota but
not in the free nodes reclaims what its cohort borrowed: ``plan`` names the borrowers'
allocations to preempt (lowest priority first, then the newest, only while their tenant
borrows, and only when they free enough), and the head waits for their release
(WAITING_FOR_PREEMPTION).

A gang is admitted whole or not at all and waits holding nothing, so two gangs can never each
hold part of what the other needs: neither deadlock nor partial hold is possible. The same
function explains a waiting allocation (ExplainAllocation): the reasons are the cycle's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import scheduling
from services.allocations import part_node
from services.allocations.part_node import PartPlacement, SharedNodes
from services.allocations.placement import Pool
from services.allocations.quotas import NODE_MILLI, Ledger, held_milli
from services.allocations.repository import Allocation
from services.nodes.inventory import GpuModel


class ReasonKind(StrEnum):
    """Why an allocation waits, as PendingReasonKind names it in the API."""

    ADMISSION_DUE = "ADMISSION_DUE"
    WAITING_FOR_CAPACITY = "WAITING_FOR_CAPACITY"
    BEHIND_GANGS = "BEHIND_GANGS"
    NO_ACCEPTABLE_MODEL = "NO_ACCEPTABLE_MODEL"
    TOPOLOGY = "TOPOLOGY"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    WAITING_FOR_PREEMPTION = "WAITING_FOR_PREEMPTION"


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason an allocation waits: its kind, a sentence with the figures, and the figures."""

    kind: ReasonKind
    message: str
    figures: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Plan:
    """A cycle's decisions over one queue: the allocations admitted with their nodes (in
    admission order), the reasons of those that wait, most binding first, and the running
    allocations to preempt, each with the reason its tenant is told."""

    admitted: list[tuple[Allocation, list[str]]]
    waiting: dict[str, list[Reason]]
    preempted: list[tuple[Allocation, str]] = field(default_factory=list)
    # Part-node allocations admitted, each with where it goes.
    parts: list[PartPlacement] = field(default_factory=list)
    # Allocations that asked not to wait and are not admitted, with no later model to try:
    # refused (the cycle withdraws them; their reasons are in ``waiting``).
    refused: list[str] = field(default_factory=list)


def plan(
    queue: Sequence[Allocation],
    pool: Pool,
    *,
    policy: scheduling.Policy,
    keep: int,
    fleet_nodes: int,
    fleet_block: int,
    ledger: Ledger | None = None,
    running: Sequence[Allocation] = (),
    reclaiming: int = 0,
    shared: SharedNodes | None = None,
    gpu_model: str | None = None,
) -> Plan:
    """Admit what the queue's order allows from ``pool`` (which the admissions take from),
    leaving ``keep`` nodes free as spares; ``fleet_nodes``: nodes of the model in any state
    but retired, ``fleet_block``: the most of them under one leaf switch. ``ledger``: the
    model's quotas and what each tenant holds (None: no quotas); ``running``: the model's
    ACTIVE allocations, which a reclaim may preempt; ``reclaiming``: nodes preempted
    allocations still hold while they are released; ``shared``: the model's shared nodes, for
    part-node allocations (part_node.py); ``gpu_model``: the model planned for, when the queue
    holds guests, allocations of other models that also accept it (None: every one is its own).

    A guest is placed here as it would be in its own queue, admitted as this model, but never
    holds this queue: one that does not fit is left to its other models, with this model's
    reason for the record. Nor does an allocation that asked not to wait (``fail_if_unavailable``):
    placed if it fits at its place, refused otherwise, once no model it accepts is left."""
    ledger = ledger or Ledger((), {})
    admitted: list[tuple[Allocation, list[str]]] = []
    waiting: dict[str, list[Reason]] = {}
    preempted: list[tuple[Allocation, str]] = []
    parts: list[PartPlacement] = []
    head: Allocation | None = None
    ahead = 0  # allocations ahead in the queue still waiting, the head among them
    for position, queued in enumerate(queue, start=1):
        here = gpu_model or queued.gpu_model
        guest = queued.gpu_model != here
        # Holds nothing back, and reclaims nothing, if it does not fit now.
        tentative = guest or queued.fail_if_unavailable
        # A guest is judged, and admitted, as an allocation of this model.
        row = _as_model(queued, here) if guest else queued
        if row.part_node:
            if not ledger.fits(row.tenant_id, held_milli(row)):
                waiting[row.allocation_id] = [quota_reason(row, ledger)]
                continue
            shared = shared or SharedNodes(GpuModel(row.gpu_model), (), ())
            placed, reasons = _part(row, shared, pool, policy=policy, keep=keep, fleet_nodes=fleet_nodes, head=head)
            if placed is not None:
                parts.append(placed)
                ledger.take(row.tenant_id, held_milli(row))
                continue
            # Waiting in the queue's order (the head if nothing ahead is blocked), unless it
            # can never be placed and is passed over, or is a guest.
            blocks = not tentative and (not reasons or reasons[0].kind is not ReasonKind.NO_ACCEPTABLE_MODEL)
            behind = [_behind(row, head, ahead, position, pool.free, keep)] if blocks and head else []
            waiting[row.allocation_id] = reasons + behind
            head = head or (row if blocks else None)
            ahead += blocks
            continue
        needed = row.node_count
        if needed > fleet_nodes - keep:
            # Even with every node of the fleet free, the spares would be left short.
            waiting[row.allocation_id] = [_no_model(row, fleet_nodes, keep)]
            continue
        if row.same_block and needed > fleet_block:
            waiting[row.allocation_id] = [_topology(row, fleet_block, pool.free, in_fleet=True)]
            continue
        if not ledger.fits(row.tenant_id, held_milli(row)):
            waiting[row.allocation_id] = [quota_reason(row, ledger)]
            continue
        if head is None:
            chosen = pool.choose(policy, needed, tenant=row.tenant_id, keep=keep, same_block=row.same_block)
            if chosen is not None:
                pool.take(chosen)
                ledger.take(row.tenant_id, held_milli(row))
                admitted.append((row, chosen))
                continue
            if tentative:
                waiting[row.allocation_id] = [_short(row, pool, keep) or _capacity(row, pool.free, keep)]
                continue
            head = row
            waiting[row.allocation_id], reclaim = _blocked(row, pool, keep, ledger, running, reclaiming)
            preempted.extend(reclaim)
        else:
            short = _short(row, pool, keep)
            # Short even with the queue ahead gone: that binds first.
            waiting[row.allocation_id] = [
                *([short] if short else []),
                _behind(row, head, ahead, position, pool.free, keep),
            ]
        ahead += not tentative
    refused = [
        row.allocation_id
        for row in queue
        if row.fail_if_unavailable
        and row.allocation_id in waiting
        and _last_choice(row) == (gpu_model or row.gpu_model)
    ]
    return Plan(admitted, waiting, preempted, parts, refused)


def _last_choice(row: Allocation) -> str:
    """The last GPU model ``row`` accepts, in its order of preference."""
    return (row.alternatives or (row.gpu_model,))[-1]


def _as_model(row: Allocation, gpu_model: str) -> Allocation:
    """``row`` as an allocation of ``gpu_model``, one of the others it accepts: the models it
    accepts stay the same, in order."""
    others = ",".join(m for m in (row.gpu_model, *row.alternatives) if m != gpu_model)
    return dataclasses.replace(row, gpu_model=gpu_model, other_models=others)


def _blocked(
    row: Allocation, pool: Pool, keep: int, ledger: Ledger, running: Sequence[Allocation], reclaiming: int
) -> tuple[list[Reason], list[tuple[Allocation, str]]]:
    """Why the head of the queue waits, and the borrowers' allocations its reclaim preempts
    (``_reclaim``), if it reclaims."""
    binding = _short(row, pool, keep) or _capacity(row, pool.free, keep)
    if binding.kind is not ReasonKind.WAITING_FOR_CAPACITY or not ledger.within_nominal(row.tenant_id, held_milli(row)):
        return [binding], []
    if row.alternatives:
        # Another model it accepts may take it this very pass: no one is preempted for it.
        return [binding], []
    reclaim = _reclaim(row, max(pool.free - keep, 0) + reclaiming, running, ledger)
    if reclaim is None:
        return [binding], []
    return [_preemption(row, pool.free, reclaiming, reclaim)], reclaim


def _part(
    row: Allocation,
    shared: SharedNodes,
    pool: Pool,
    *,
    policy: scheduling.Policy,
    keep: int,
    fleet_nodes: int,
    head: Allocation | None,
) -> tuple[PartPlacement | None, list[Reason]]:
    """A part-node allocation's placement, while no allocation ahead is blocked: on a shared
    node if one has room, else on a free node it opens. Otherwise why it waits, beside the
    allocation ahead (which ``plan`` adds): behind a blocked allocation nothing is placed, on
    shared nodes either, since allocations declare no run time and any node, shared or free,
    may be the one it waits for."""
    model = GpuModel(row.gpu_model)
    never = part_node.never_fits(model, mig_profile=row.mig_profile, cpu_milli=row.cpu_milli, memory_mib=row.memory_mib)
    if never is not None or (fleet_nodes - keep < 1 and shared.nodes == 0):
        return None, [_no_model(row, fleet_nodes, keep, never and never[1])]
    if head is None:
        placed = shared.place(policy, row) or shared.open(policy, row, pool, keep=keep)
        if placed is not None:
            return placed, []
    elif shared.fits(policy, row) or pool.free - keep >= 1:
        return None, []  # it would fit: only the blocked allocation ahead holds it back
    return None, [_part_capacity(row, shared, pool.free, keep)]


def _part_capacity(row: Allocation, shared: SharedNodes, free: int, keep: int) -> Reason:
    held_back = f" ({keep} of them held back as spares)" if keep else ""
    on_shared = (
        f"{shared.free_gpus} GPU(s) free over {shared.nodes} shared {row.gpu_model} node(s), at most"
        f" {shared.most_free_on_one} on one, and none has room"
        if shared.nodes
        else f"no {row.gpu_model} node is shared by part-node work yet"
    )
    return Reason(
        ReasonKind.WAITING_FOR_CAPACITY,
        f"waiting for capacity for {part_node.describe(row)}: {on_shared}; {free} free node(s){held_back} to open",
        {
            "free_gpus": shared.free_gpus,
            "shared_nodes": shared.nodes,
            "most_free_on_one": shared.most_free_on_one,
            "needed_gpus": row.gpus,
            "free": free,
            "spares": keep,
        },
    )


def _reclaim(
    row: Allocation, coming: int, running: Sequence[Allocation], ledger: Ledger
) -> list[tuple[Allocation, str]] | None:
    """The borrowers' allocations to preempt so that ``row``, within its own quota, fits once
    they are released (``coming``: nodes free or on their way back already); None when the
    borrowers cannot free enough, so that no one is preempted for nothing. The ledger counts
    the victims' nodes given back."""
    short = row.node_count - coming
    if short <= 0:
        return []  # what is on its way back suffices
    borrowed = {t: ledger.borrowed_milli(t) for t in {a.tenant_id for a in running} if ledger.limited(t)}
    candidates = sorted(
        (a for a in running if a.tenant_id != row.tenant_id and ledger.same_cohort(row.tenant_id, a.tenant_id)),
        key=lambda a: (a.priority, -(a.admitted_us or 0), a.allocation_id),
    )
    victims = []
    for victim in candidates:
        if borrowed[victim.tenant_id] <= 0:
            continue  # its tenant no longer borrows: the rest is its own quota
        borrowed[victim.tenant_id] -= held_milli(victim)
        victims.append(victim)
        short -= victim.node_count
        if short <= 0:
            break
    if short > 0:
        return None
    reasons = []
    for victim in victims:
        reasons.append((victim, _victim_reason(victim, row, ledger)))
        ledger.give_back(victim.tenant_id, held_milli(victim))
    return reasons


def _victim_reason(victim: Allocation, reclaimer: Allocation, ledger: Ledger) -> str:
    return (
        f"preempted: tenant {reclaimer.tenant_id} reclaims its {reclaimer.gpu_model} quota"
        f" ({ledger.nominal(reclaimer.tenant_id)} node(s)), which tenant {victim.tenant_id} was borrowing:"
        f" it held {ledger.used(victim.tenant_id)} {victim.gpu_model} node(s) against a quota of"
        f" {ledger.nominal(victim.tenant_id)}"
    )


def _preemption(row: Allocation, free: int, reclaiming: int, victims: Sequence[tuple[Allocation, str]]) -> Reason:
    returning = reclaiming + sum(victim.node_count for victim, _ in victims)
    return Reason(
        ReasonKind.WAITING_FOR_PREEMPTION,
        f"waiting for preemption: within its tenant's own quota, it reclaims {returning} {row.gpu_model} node(s)"
        f" its cohort borrowed; they are scrubbed and released before it is admitted ({free} free now,"
        f" {row.node_count} needed)",
        {"reclaiming": returning, "free": free, "needed": row.node_count},
    )


def quota_reason(row: Allocation, ledger: Ledger) -> Reason:
    """Why ``row`` waits for its tenant's quota: what the tenant holds, and its limit now. In
    nodes while the tenant holds and asks whole nodes only; in GPUs once part-node work is
    counted, with the thousandths of a GPU as figures beside the nodes."""
    tenant = row.tenant_id
    used, nominal, limit = ledger.used(tenant), ledger.nominal(tenant), ledger.limit(tenant)
    figures = {"used": used, "limit": limit, "nominal": nominal, "needed": row.node_count}
    borrow = f", and {limit - nominal} it may borrow from its cohort now" if limit > nominal else ""
    held, asked = ledger.used_milli(tenant), held_milli(row)
    if not row.part_node and held % NODE_MILLI == 0:
        own = f" (its quota {nominal}{borrow})" if borrow else ""
        holds = f"holds {used} of {limit} {row.gpu_model} node(s){own}; {row.node_count} more asked"
    else:
        figures |= {"used_gpu_milli": held, "limit_gpu_milli": limit * NODE_MILLI, "needed_gpu_milli": asked}
        holds = (
            f"holds {_gpus(held)} of {_gpus(limit * NODE_MILLI)} {row.gpu_model} GPU(s) (its quota {nominal}"
            f" node(s){borrow}, part-node work counted by its GPUs); {part_node.describe(row)} asked"
        )
    return Reason(
        ReasonKind.QUOTA_EXCEEDED,
        f"quota exceeded: tenant {tenant} {holds}. It waits, holding nothing back from other tenants",
        figures,
    )


def _gpus(milli: int) -> str:
    """Thousandths of a GPU as GPUs: "16", "2.5", "0.143"."""
    return f"{milli / 1000:.3f}".rstrip("0").rstrip(".")


def due(row: Allocation) -> Reason:
    """The reason of an allocation the next cycle admits: it fits and nothing blocks it."""
    return Reason(
        ReasonKind.ADMISSION_DUE,
        f"room for {part_node.describe(row)} is free and nothing ahead waits: the next scheduling cycle admits it",
        {"needed": row.node_count},
    )


def _short(row: Allocation, pool: Pool, keep: int) -> Reason | None:
    """Why the pool as it stands cannot hold ``row`` whatever waits ahead of it, if it cannot."""
    if pool.free - keep < row.node_count:
        return _capacity(row, pool.free, keep)
    if row.same_block and pool.largest_free_block < row.node_count:
        return _topology(row, pool.largest_free_block, pool.free, in_fleet=False)
    return None


def _topology(row: Allocation, largest: int, free: int, *, in_fleet: bool) -> Reason:
    where = (
        f"no leaf switch in the fleet has {row.node_count} {row.gpu_model} node(s) (the largest has {largest}):"
        " it waits for nodes to be added, holding nothing back"
        if in_fleet
        else f"{free} {row.gpu_model} node(s) are free, but the largest free block under one leaf switch has"
        f" {largest}, and it needs {row.node_count} there"
    )
    return Reason(
        ReasonKind.TOPOLOGY,
        f"topology: {where}",
        {"largest_block": largest, "needed": row.node_count, "free": free},
    )


def _capacity(row: Allocation, free: int, keep: int) -> Reason:
    usable = max(free - keep, 0)
    held_back = f" ({keep} of them held back as spares)" if keep else ""
    return Reason(
        ReasonKind.WAITING_FOR_CAPACITY,
        f"waiting for capacity: {free} free {row.gpu_model} node(s){held_back}, {row.node_count} needed"
        f" whole; short by {row.node_count - usable}",
        {"free": free, "spares": keep, "needed": row.node_count},
    )


def _behind(row: Allocation, head: Allocation, ahead: int, position: int, free: int, keep: int) -> Reason:
    return Reason(
        ReasonKind.BEHIND_GANGS,
        f"behind {ahead} waiting allocation(s) in the {row.gpu_model} queue (position {position}):"
        f" the allocation at its head needs {part_node.describe(head)} and holds the"
        f" {max(free - keep, 0)} free node(s) for itself until it fits",
        {"ahead": ahead, "position": position, "head_needs": max(head.node_count, 1), "free": free},
    )


def _no_model(row: Allocation, fleet_nodes: int, keep: int, never: str | None = None) -> Reason:
    if never is not None:
        return Reason(
            ReasonKind.NO_ACCEPTABLE_MODEL,
            f"no {row.gpu_model} node can hold {part_node.describe(row)}: {never}; it waits, holding nothing back",
            {"fleet": fleet_nodes, "spares": keep, "needed": max(row.node_count, 1)},
        )
    spares = f", {keep} of them held back as spares" if keep else ""
    return Reason(
        ReasonKind.NO_ACCEPTABLE_MODEL,
        f"the fleet has {fleet_nodes} {row.gpu_model} node(s) in any state{spares}, fewer than the"
        f" {max(row.node_count, 1)} it needs: it waits for nodes to be added, holding nothing back",
        {"fleet": fleet_nodes, "spares": keep, "needed": max(row.node_count, 1)},
    )

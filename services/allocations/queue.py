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

A gang is admitted whole or not at all and waits holding nothing, so two gangs can never each
hold part of what the other needs: neither deadlock nor partial hold is possible. The same
function explains a waiting allocation (ExplainAllocation): the reasons are the cycle's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import scheduling
from services.allocations.placement import Pool
from services.allocations.repository import Allocation


class ReasonKind(StrEnum):
    """Why an allocation waits, as PendingReasonKind names it in the API."""

    ADMISSION_DUE = "ADMISSION_DUE"
    WAITING_FOR_CAPACITY = "WAITING_FOR_CAPACITY"
    BEHIND_GANGS = "BEHIND_GANGS"
    NO_ACCEPTABLE_MODEL = "NO_ACCEPTABLE_MODEL"
    TOPOLOGY = "TOPOLOGY"


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason an allocation waits: its kind, a sentence with the figures, and the figures."""

    kind: ReasonKind
    message: str
    figures: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Plan:
    """A cycle's decisions over one queue: the allocations admitted with their nodes (in
    admission order), and the reasons of those that wait, most binding first."""

    admitted: list[tuple[Allocation, list[str]]]
    waiting: dict[str, list[Reason]]


def plan(
    queue: Sequence[Allocation],
    pool: Pool,
    *,
    policy: scheduling.Policy,
    keep: int,
    fleet_nodes: int,
    fleet_block: int,
) -> Plan:
    """Admit what the queue's order allows from ``pool`` (which the admissions take from),
    leaving ``keep`` nodes free as spares; ``fleet_nodes``: nodes of the model in any state
    but retired, ``fleet_block``: the most of them under one leaf switch."""
    admitted: list[tuple[Allocation, list[str]]] = []
    waiting: dict[str, list[Reason]] = {}
    head: Allocation | None = None
    ahead = 0  # allocations ahead in the queue still waiting, the head among them
    for position, row in enumerate(queue, start=1):
        needed = row.node_count
        if needed > fleet_nodes - keep:
            # Even with every node of the fleet free, the spares would be left short.
            waiting[row.allocation_id] = [_no_model(row, fleet_nodes, keep)]
            continue
        if row.same_block and needed > fleet_block:
            waiting[row.allocation_id] = [_topology(row, fleet_block, pool.free, in_fleet=True)]
            continue
        if head is None:
            chosen = pool.choose(policy, needed, tenant=row.tenant_id, keep=keep, same_block=row.same_block)
            if chosen is not None:
                pool.take(chosen)
                admitted.append((row, chosen))
                continue
            head = row
            waiting[row.allocation_id] = [_short(row, pool, keep) or _capacity(row, pool.free, keep)]
        else:
            reasons = [_behind(row, head, ahead, position, pool.free, keep)]
            short = _short(row, pool, keep)
            if short is not None:
                # Short even with the queue ahead gone: that binds first.
                reasons.insert(0, short)
            waiting[row.allocation_id] = reasons
        ahead += 1
    return Plan(admitted, waiting)


def due(row: Allocation) -> Reason:
    """The reason of an allocation the next cycle admits: it fits and nothing blocks it."""
    return Reason(
        ReasonKind.ADMISSION_DUE,
        f"{row.node_count} {row.gpu_model} node(s) are free for it and nothing ahead waits:"
        " the next scheduling cycle admits it",
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
        f" the allocation at its head needs {head.node_count} node(s) and holds the"
        f" {max(free - keep, 0)} free for itself until it fits",
        {"ahead": ahead, "position": position, "head_needs": head.node_count, "free": free},
    )


def _no_model(row: Allocation, fleet_nodes: int, keep: int) -> Reason:
    spares = f", {keep} of them held back as spares" if keep else ""
    return Reason(
        ReasonKind.NO_ACCEPTABLE_MODEL,
        f"the fleet has {fleet_nodes} {row.gpu_model} node(s) in any state{spares}, fewer than the"
        f" {row.node_count} asked: it waits for nodes to be added, holding nothing back",
        {"fleet": fleet_nodes, "spares": keep, "needed": row.node_count},
    )

"""What must hold of the records a node leaves as it passes from tenant to tenant.

Read straight from the database, to the microsecond: every node's events are in time order
(the order of ``event_seq``, in which they committed); on every GPU the usage intervals (a
start to its stop, or to the end of time when none) of different allocations never overlap,
so billing never charges two holds for one instant and no tenant's metrics window opens
before the previous one's closed; and every node is handed to its next allocation at or
after its previous allocation released it. The last is the check that sees an admission
stamped early: a hold ends at its cancel, well before the release, so an admission stamped
between the two overlaps no usage interval. (An allocation may be created, PENDING, long
before; what counts is when it was admitted.)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sqlalchemy import text

from services.store.engine import Database

OPEN = 2**63 - 1


@dataclass(frozen=True)
class OutOfOrder:
    """A node event stamped before the event committed ahead of it."""

    node_id: str
    before: tuple[str, int]
    after: tuple[str, int]


@dataclass(frozen=True)
class Overlap:
    """Two allocations' usage intervals on one GPU that share time."""

    gpu_uuid: str
    first: tuple[str, int, int]
    second: tuple[str, int, int]


@dataclass(frozen=True)
class EarlyHandover:
    """A node's allocation admitted, or its node assigned, before the node's previous allocation
    released it (or while that one still holds it: ``released_us`` None)."""

    node_id: str
    previous: tuple[str, int | None]
    next: tuple[str, int, int]


async def handovers_before_release(store: Database) -> list[EarlyHandover]:
    """Each assignment of a node, in the order they were made, whose allocation's ``admitted_us``
    or whose own ``assigned_us`` is earlier than the previous assignment's ``released_us``."""
    async with store.read() as session:
        connection = await session.connection()
        rows = (
            await connection.execute(
                text(
                    "SELECT s.node_id, s.allocation_id, a.admitted_us, s.assigned_us, s.released_us"
                    " FROM assignments s JOIN allocations a ON a.allocation_id = s.allocation_id"
                    " ORDER BY s.node_id, s.assignment_id"
                )
            )
        ).all()
    found: list[EarlyHandover] = []
    for previous, following in itertools.pairwise(rows):
        node, allocation, admitted, assigned, _ = following
        if node != previous.node_id:
            continue
        released = previous.released_us
        if released is None or min(admitted, assigned) < released:
            found.append(
                EarlyHandover(
                    str(node),
                    (str(previous.allocation_id), None if released is None else int(released)),
                    (str(allocation), int(admitted), int(assigned)),
                )
            )
    return found


async def node_events_out_of_order(store: Database) -> list[OutOfOrder]:
    """Each node event whose time is earlier than its predecessor's on the same node."""
    async with store.read() as session:
        connection = await session.connection()
        rows = (
            await connection.execute(text("SELECT node_id, event, at_us FROM node_events ORDER BY node_id, event_seq"))
        ).all()
    found: list[OutOfOrder] = []
    for (prev_node, prev_event, prev_at), (node, event, at) in itertools.pairwise(rows):
        if node == prev_node and at < prev_at:
            found.append(OutOfOrder(str(node), (str(prev_event), int(prev_at)), (str(event), int(at))))
    return found


async def usage_overlaps(store: Database) -> list[Overlap]:
    """Each pair of consecutive allocations' intervals on one GPU that overlap."""
    async with store.read() as session:
        connection = await session.connection()
        rows = (await connection.execute(text("SELECT allocation_id, gpu_uuid, kind, at_us FROM usage_events"))).all()
    spans: dict[tuple[str, str], list[int]] = {}
    for allocation_id, gpu_uuid, kind, at_us in rows:
        span = spans.setdefault((str(gpu_uuid), str(allocation_id)), [OPEN, OPEN])
        span[0 if kind == "start" else 1] = int(at_us)
    by_gpu: dict[str, list[tuple[int, int, str]]] = {}
    for (gpu_uuid, allocation_id), (start, stop) in spans.items():
        by_gpu.setdefault(gpu_uuid, []).append((start, stop, allocation_id))
    found: list[Overlap] = []
    for gpu_uuid, intervals in by_gpu.items():
        intervals.sort()
        for (start, stop, allocation), (next_start, next_stop, next_allocation) in itertools.pairwise(intervals):
            if next_start < stop:
                found.append(Overlap(gpu_uuid, (allocation, start, stop), (next_allocation, next_start, next_stop)))
    return found

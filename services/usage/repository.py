"""Writes usage events inside the transaction of the state change that causes them.

Placement writes a ``start`` per GPU of every node it hands over; the releaser writes a
``stop`` per GPU when the nodes come back. The event id is ``<allocation>/<gpu>/<kind>``: a
transaction that is replayed or retried writes the same ids, and the primary key refuses a
second copy, so a GPU is never billed twice for one hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import select as sa_select
from sqlmodel.ext.asyncio.session import AsyncSession

from services.store import core
from services.store.models import GpuRow, UsageEventRow, table_of

CONTROL_PLANE_SOURCE = "control-plane"


class UsageKind(StrEnum):
    START = "start"
    STOP = "stop"


def event_id(allocation_id: str, gpu_uuid: str, kind: UsageKind) -> str:
    return f"{allocation_id}/{gpu_uuid}/{kind}"


@dataclass(frozen=True)
class Hold:
    """A node held by (or returned from) a tenant's allocation."""

    tenant_id: str
    allocation_id: str
    gpu_model: str
    node_id: str


async def record(session: AsyncSession, kind: UsageKind, holds: Sequence[Hold], *, at_us: int) -> None:
    """One event of ``kind`` at ``at_us`` for every GPU of every held node."""
    if not holds:
        return
    by_node = {h.node_id: h for h in holds}
    gpus = table_of(GpuRow)
    query = sa_select(gpus.c.node_id, gpus.c.gpu_uuid).where(gpus.c.node_id.in_(list(by_node)))
    rows: list[Sequence[Any]] = list((await core.execute(session, query)).all())
    events = []
    for node_id, gpu_uuid in rows:
        hold = by_node[str(node_id)]
        events.append(
            {
                "event_id": event_id(hold.allocation_id, str(gpu_uuid), kind),
                "tenant_id": hold.tenant_id,
                "allocation_id": hold.allocation_id,
                "node_id": hold.node_id,
                "gpu_uuid": str(gpu_uuid),
                "gpu_model": hold.gpu_model,
                "kind": kind.value,
                "at_us": at_us,
                "source": CONTROL_PLANE_SOURCE,
                "recorded_us": at_us,
            }
        )
    await core.execute(session, table_of(UsageEventRow).insert(), events)

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

from services.store.tx import Sql, Tx, expand

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


def record(kind: UsageKind, holds: Sequence[Hold], *, at_us: int) -> Tx[None]:
    """One event of ``kind`` at ``at_us`` for every GPU of every held node."""
    if not holds:
        return
    by_node = {h.node_id: h for h in holds}
    ids, params = expand("id", by_node)
    result = yield Sql(f"SELECT node_id, gpu_uuid FROM gpus WHERE node_id IN ({ids})", params)
    events = []
    for node_id, gpu_uuid in result.rows:
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
    yield Sql(
        "INSERT INTO usage_events (event_id, tenant_id, allocation_id, node_id, gpu_uuid, gpu_model, kind, at_us,"
        " source, recorded_us) VALUES (:event_id, :tenant_id, :allocation_id, :node_id, :gpu_uuid, :gpu_model,"
        " :kind, :at_us, :source, :recorded_us)",
        rows=events,
    )

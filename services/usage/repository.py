"""Writes usage events inside the transaction of the state change that causes them.

Placement writes a ``start`` per GPU of every node it hands over; accepting a cancel writes a
``stop`` per GPU, since the tenant loses the nodes then (their scrub, and the release after it,
are the provider's time). A node the health controller takes from an allocation stops there,
and its spare starts, each GPU at the replacement's time. The event id is
``<allocation>/<gpu>/<kind>``: a transaction that is replayed or retried writes the same ids,
and the primary key refuses a second copy, so a GPU is never billed twice for one hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from services.store.tx import Sql, Tx, expand

CONTROL_PLANE_SOURCE = "control-plane"


class UsageKind(StrEnum):
    """Whether a usage event starts or stops billing a GPU (``usage_events.kind``)."""

    START = "start"
    STOP = "stop"


def record(
    kind: UsageKind, allocation_ids: Sequence[str], *, at_us: int, node_ids: Sequence[str] | None = None
) -> Tx[None]:
    """One event of ``kind`` at ``at_us`` for every GPU of every node the allocations hold
    (only of ``node_ids`` when given: a node taken from its allocation, or its spare).

    Placement calls it after writing the assignments, a cancel before they end. One
    INSERT ... SELECT: the rows never travel through Python.
    """
    if not allocation_ids:
        return
    ids, params = expand("id", allocation_ids)
    only = ""
    if node_ids is not None:
        nodes, node_params = expand("node", node_ids)
        only, params = f" AND a.node_id IN ({nodes})", {**params, **node_params}
    yield Sql(
        "INSERT INTO usage_events (event_id, tenant_id, allocation_id, node_id, gpu_uuid, gpu_model, kind, at_us,"
        " source, recorded_us)"
        " SELECT a.allocation_id || '/' || g.gpu_uuid || '/' || :kind, al.tenant_id, a.allocation_id, a.node_id,"
        " g.gpu_uuid, al.gpu_model, :kind, :at, :source, :at"
        " FROM assignments a JOIN allocations al ON al.allocation_id = a.allocation_id"
        " JOIN gpus g ON g.node_id = a.node_id"
        f" WHERE a.allocation_id IN ({ids}) AND a.released_us IS NULL{only}",
        {**params, "kind": kind.value, "at": at_us, "source": CONTROL_PLANE_SOURCE},
    )

"""Writes usage events inside the transaction of the state change that causes them.

Placement writes a ``start`` per GPU of every node it hands over; accepting a cancel writes a
``stop`` per GPU, since the tenant loses the nodes then (their scrub, and the release after it,
are the provider's time). A node the health controller takes from an allocation stops there,
and its spare starts, each GPU at the replacement's time. The event id is
``<allocation>/<gpu>/<kind>``: a transaction that is replayed or retried writes the same ids,
and the primary key refuses a second copy, so a GPU is never billed twice for one hold.

A part-node allocation's whole GPUs are billed as GPUs. A MIG slice or a soft share is billed
as its own unit: ``<gpu uuid>/<allocation>``, of the model ``<model>/<thousandths>`` (an H100
3g.40gb slice, four of eight memory slices, is ``H100/500``), which the rate card prices at
its fraction of the model's rate (accounting.Rates.rate). The billing rules are the GPUs'
own; only the unit and its price differ. CPU and memory alone are not billed.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from services.store.tx import Sql, Tx, expand

CONTROL_PLANE_SOURCE = "control-plane"
_COLUMNS = "event_id, tenant_id, allocation_id, node_id, gpu_uuid, gpu_model, kind, at_us, source, recorded_us"
# A hold of a whole GPU, in thousandths.
_WHOLE = 1000


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
    binds = {**params, "kind": kind.value, "at": at_us, "source": CONTROL_PLANE_SOURCE}
    yield Sql(
        f"INSERT INTO usage_events ({_COLUMNS})"
        " SELECT a.allocation_id || '/' || g.gpu_uuid || '/' || :kind, al.tenant_id, a.allocation_id, a.node_id,"
        " g.gpu_uuid, al.gpu_model, :kind, :at, :source, :at"
        " FROM assignments a JOIN allocations al ON al.allocation_id = a.allocation_id"
        " JOIN gpus g ON g.node_id = a.node_id"
        f" WHERE a.allocation_id IN ({ids}) AND a.released_us IS NULL{only}",
        binds,
    )


def record_holds(kind: UsageKind, allocation_ids: Sequence[str], *, at_us: int) -> Tx[None]:
    """One event of ``kind`` at ``at_us`` for every GPU the part-node allocations hold live
    (none for CPU and memory alone): a whole GPU as itself, a MIG slice or a share as its own
    unit priced at its fraction. Called after writing the holds, a cancel before they end."""
    if not allocation_ids:
        return
    ids, params = expand("id", allocation_ids)
    binds = {**params, "kind": kind.value, "at": at_us, "source": CONTROL_PLANE_SOURCE}
    unit = f"CASE WHEN h.milli = {_WHOLE} THEN g.gpu_uuid ELSE g.gpu_uuid || '/' || h.allocation_id END"
    model = f"CASE WHEN h.milli = {_WHOLE} THEN al.gpu_model ELSE al.gpu_model || '/' || CAST(h.milli AS TEXT) END"
    yield Sql(
        f"INSERT INTO usage_events ({_COLUMNS})"
        f" SELECT h.allocation_id || '/' || {unit} || '/' || :kind, al.tenant_id, h.allocation_id, h.node_id,"
        f" {unit}, {model}, :kind, :at, :source, :at"
        " FROM gpu_holds h JOIN allocations al ON al.allocation_id = h.allocation_id"
        " JOIN gpus g ON g.node_id = h.node_id AND g.gpu_index = h.gpu_index"
        f" WHERE h.allocation_id IN ({ids}) AND h.released_us IS NULL",
        binds,
    )

"""What the metrics service reads from the control plane's database, as transaction steps
(store/tx.py): which nodes exist and of which model, and which a tenant held when (from the usage events billing
reads). It writes nothing there; samples live in the tsdb (services/metrics/samples.py).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from services.metrics.holds import HoldRecord
from services.store.tx import Sql, Tx, expand
from services.usage.repository import UsageKind

# Node ids asked about in one statement at most (bind parameters per statement).
_CHUNK = 512


def _chunks(node_ids: Collection[str]) -> list[list[str]]:
    ordered = sorted(node_ids)
    return [ordered[start : start + _CHUNK] for start in range(0, len(ordered), _CHUNK)]


def existing_nodes(node_ids: Collection[str]) -> Tx[set[str]]:
    """The ids among ``node_ids`` that name registered nodes: one statement per 512 ids."""
    found: set[str] = set()
    for chunk in _chunks(node_ids):
        ids, params = expand("id", chunk)
        result = yield Sql(f"SELECT node_id FROM nodes WHERE node_id IN ({ids})", params)
        found |= {str(row[0]) for row in result.rows}
    return found


def node_models() -> Tx[dict[str, str]]:
    """Every registered node's GPU model, by node id."""
    result = yield Sql("SELECT node_id, gpu_model FROM nodes")
    return {str(node_id): str(model) for node_id, model in result.rows}


_HOLDS = (
    "SELECT allocation_id, node_id, kind, MIN(at_us), MAX(at_us) FROM usage_events WHERE tenant_id = :tenant{nodes}"
    " GROUP BY allocation_id, node_id, kind"
)


def hold_records(tenant_id: str, node_ids: Collection[str] = ()) -> Tx[list[HoldRecord]]:
    """Per (allocation, node) of the tenant: its first start and last stop (one per GPU each).

    ``node_ids`` narrows to those nodes (one statement per 512); empty means every node the
    tenant ever held. Served by the (tenant_id, at_us) index.
    """
    rows: list[Sequence[Any]] = []
    if not node_ids:
        rows = (yield Sql(_HOLDS.format(nodes=""), {"tenant": tenant_id})).rows
    for chunk in _chunks(node_ids):
        ids, params = expand("node", chunk)
        rows += (yield Sql(_HOLDS.format(nodes=f" AND node_id IN ({ids})"), {**params, "tenant": tenant_id})).rows
    starts: dict[tuple[str, str], int] = {}
    stops: dict[tuple[str, str], int] = {}
    for allocation_id, node_id, kind, first_us, last_us in rows:
        key = (str(allocation_id), str(node_id))
        if kind == UsageKind.START:
            starts[key] = int(first_us)
        elif kind == UsageKind.STOP:
            stops[key] = int(last_us)
    keys = sorted(starts.keys() | stops.keys())
    gpus = yield from _part_node_gpus(sorted({a for a, _ in keys}))
    return [
        HoldRecord(
            allocation_id=a, node_id=n, start_us=starts.get((a, n)), stop_us=stops.get((a, n)), gpus=gpus.get(a, ())
        )
        for a, n in keys
    ]


def _part_node_gpus(allocation_ids: Sequence[str]) -> Tx[dict[str, tuple[int, ...]]]:
    """The GPU indexes each part-node allocation among ``allocation_ids`` holds or held on
    its one node; whole-node allocations are absent."""
    found: dict[str, list[int]] = {}
    for chunk in _chunks(allocation_ids):
        ids, params = expand("id", chunk)
        result = yield Sql(
            f"SELECT allocation_id, gpu_index FROM gpu_holds WHERE allocation_id IN ({ids}) AND gpu_index >= 0", params
        )
        for allocation_id, index in result.rows:
            found.setdefault(str(allocation_id), []).append(int(index))
    return {allocation_id: tuple(sorted(indexes)) for allocation_id, indexes in found.items()}

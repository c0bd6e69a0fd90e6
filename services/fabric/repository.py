"""What the isolation audit reads, as transaction steps (store/tx.py): every node with its
holder's partition key and the status its agent last reported."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import NamedTuple

from services.fabric.audit import NodePartitions
from services.fabric.partitions import DEFAULT_PARTITION_KEY
from services.nodes.transitions import NodeState
from services.store.tx import Sql, Tx


class ReportedNode(NamedTuple):
    """A node, the tenant holding it and that tenant's key (None: none holds it), and the status
    its agent last reported, as stored (JSON)."""

    node_id: str
    state: str
    tenant_id: str | None
    tenant_key: int | None
    status_json: str


def reported_nodes() -> Tx[list[ReportedNode]]:
    """Every node whose agent has reported a status, in one snapshot."""
    result = yield Sql(
        "SELECT n.node_id, n.state, a.tenant_id, p.partition_key, s.status_json FROM nodes n"
        " JOIN node_status s ON s.node_id = n.node_id"
        " LEFT JOIN assignments a ON a.node_id = n.node_id AND a.released_us IS NULL"
        " LEFT JOIN partition_keys p ON p.tenant_id = a.tenant_id"
    )
    return [ReportedNode(*row) for row in result.rows]


def partitions_of(nodes: Iterable[ReportedNode]) -> list[NodePartitions]:
    """Each node with the partitions its status lists, but the fabric's default one: decoding
    every node's status is CPU work for a thread, not the event loop."""
    return [
        NodePartitions(
            str(node.node_id),
            NodeState(node.state),
            None if node.tenant_id is None else str(node.tenant_id),
            None if node.tenant_key is None else int(node.tenant_key),
            tuple(
                sorted(
                    key
                    for key in map(int, json.loads(node.status_json).get("partitionKeys", ()))
                    if key != DEFAULT_PARTITION_KEY
                )
            ),
        )
        for node in nodes
    ]


def owners() -> Tx[dict[int, str]]:
    """Every partition key and its tenant."""
    result = yield Sql("SELECT partition_key, tenant_id FROM partition_keys")
    return {int(key): str(tenant) for key, tenant in result.rows}

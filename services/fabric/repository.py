"""What the isolation audit reads, as transaction steps (store/tx.py): every node with its
holder's partition key and the partitions its agent last reported."""

from __future__ import annotations

import json

from services.fabric.audit import NodePartitions
from services.fabric.partitions import DEFAULT_PARTITION_KEY
from services.nodes.transitions import NodeState
from services.store.tx import Sql, Tx


def reported_partitions() -> Tx[list[NodePartitions]]:
    """Every node whose agent has reported a status, with the tenant holding it (if any), that
    tenant's key, and the partitions reported but the fabric's default one, in one snapshot."""
    result = yield Sql(
        "SELECT n.node_id, n.state, a.tenant_id, p.partition_key, s.status_json FROM nodes n"
        " JOIN node_status s ON s.node_id = n.node_id"
        " LEFT JOIN assignments a ON a.node_id = n.node_id AND a.released_us IS NULL"
        " LEFT JOIN partition_keys p ON p.tenant_id = a.tenant_id"
    )
    return [
        NodePartitions(
            str(node_id),
            NodeState(state),
            None if tenant is None else str(tenant),
            None if key is None else int(key),
            tuple(
                sorted(k for k in map(int, json.loads(status).get("partitionKeys", ())) if k != DEFAULT_PARTITION_KEY)
            ),
        )
        for node_id, state, tenant, key, status in result.rows
    ]


def owners() -> Tx[dict[int, str]]:
    """Every partition key and its tenant."""
    result = yield Sql("SELECT partition_key, tenant_id FROM partition_keys")
    return {int(key): str(tenant) for key, tenant in result.rows}

"""Tenants' fabric partitions: a key each, and which one a node must be a member of.

Each tenant gets its own partition key when it is created (InfiniBand partition keys are 15
bits: 0x7FFF is the fabric's default partition, 0 is invalid, so a fabric has 32,766 for
tenants). A node is a member of exactly its tenant's partition while the tenant holds it and
works on it (ALLOCATED, or DRAINING: still the tenant's until released), and of none
otherwise: a scrub leaves every partition before the node is READY again.
"""

from __future__ import annotations

from services.errors import ResourceExhausted
from services.nodes.transitions import NodeState
from services.store.tx import Sql, Tx

MAX_PARTITION_KEY = 0x7FFE
# The fabric's default partition, which every port is in: no tenant's, and no isolation matter.
DEFAULT_PARTITION_KEY = 0x7FFF
# States in which a node is in its tenant's partition.
IN_PARTITION = frozenset({NodeState.ALLOCATED, NodeState.DRAINING})


def assign(tenant_id: str) -> Tx[int]:
    """Give a new tenant the next partition key, as a step of the transaction creating it."""
    result = yield Sql(
        "INSERT INTO partition_keys (tenant_id) VALUES (:tenant) RETURNING partition_key", {"tenant": tenant_id}
    )
    found = result.first()
    key = 0 if found is None else int(found[0])
    if not 0 < key <= MAX_PARTITION_KEY:
        raise ResourceExhausted(
            reason="PARTITION_KEYS_EXHAUSTED",
            message=f"the fabric has {MAX_PARTITION_KEY} partition keys for tenants and all are taken",
            metadata={"tenant_id": tenant_id},
        )
    return key


def expected(state: NodeState, tenant_key: int | None) -> tuple[int, ...]:
    """The partitions a node in ``state`` must be a member of, given its holder's key."""
    return (tenant_key,) if tenant_key is not None and state in IN_PARTITION else ()

"""The isolation audit: what each node's agent reports of its partitions against whom the node
belongs to. Pure: the caller reads the nodes (repository.py).

Three kinds of violation, each a way one tenant could reach another's traffic: a node in two
partitions at once; a node no tenant holds that is still in a partition (it was not scrubbed
out of it, and the next tenant would join a stranger's partition); a node a tenant holds that
is in another tenant's partition. A held node missing its tenant's partition is not a
violation (its tenant is cut off, nobody is exposed), and is not listed. A node scrubbing is
held until released: its tenant's partition is allowed there, another's is not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from services.nodes.transitions import HELD_STATES, NodeState


class ViolationKind(StrEnum):
    """How a node's partitions break isolation (the proto's IsolationViolationKind)."""

    TWO_PARTITIONS = "TWO_PARTITIONS"
    FREE_NODE_IN_PARTITION = "FREE_NODE_IN_PARTITION"
    ANOTHER_TENANTS_PARTITION = "ANOTHER_TENANTS_PARTITION"


@dataclass(frozen=True, slots=True)
class NodePartitions:
    """A node as the audit sees it: its state, the tenant holding it (with that tenant's key),
    and the partitions its agent last reported."""

    node_id: str
    state: NodeState
    tenant_id: str | None
    tenant_key: int | None
    reported: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Violation:
    """One violation on one node, with what is wrong in words."""

    node: NodePartitions
    kind: ViolationKind
    message: str


def audit(nodes: Iterable[NodePartitions], owners: Mapping[int, str]) -> list[Violation]:
    """Every violation, by node id then kind; ``owners`` maps each partition key to its tenant."""
    found: list[Violation] = []
    for node in sorted(nodes, key=lambda n: n.node_id):
        named = ", ".join(_named(key, owners) for key in node.reported)
        if len(node.reported) > 1:
            found.append(Violation(node, ViolationKind.TWO_PARTITIONS, f"in {len(node.reported)} partitions: {named}"))
        held = node.tenant_id is not None and node.state in HELD_STATES
        if not held and node.reported:
            found.append(
                Violation(
                    node,
                    ViolationKind.FREE_NODE_IN_PARTITION,
                    f"{node.state} and held by no tenant, yet in {named}",
                )
            )
        strangers = [key for key in node.reported if key != node.tenant_key]
        if held and strangers:
            found.append(
                Violation(
                    node,
                    ViolationKind.ANOTHER_TENANTS_PARTITION,
                    f"held by {node.tenant_id} (key {node.tenant_key}), yet in"
                    f" {', '.join(_named(key, owners) for key in strangers)}",
                )
            )
    return found


def _named(key: int, owners: Mapping[int, str]) -> str:
    owner = owners.get(key)
    return f"{owner}'s partition {key}" if owner is not None else f"partition {key} (no tenant's)"

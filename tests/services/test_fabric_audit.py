"""The isolation audit's rules, on nodes as the audit reads them."""

from __future__ import annotations

from services.fabric.audit import NodePartitions, ViolationKind, audit
from services.fabric.partitions import expected
from services.nodes.transitions import NodeState

OWNERS = {1: "acme", 2: "beta"}


def node(node_id: str, state: NodeState, tenant: str | None, reported: tuple[int, ...]) -> NodePartitions:
    key = {"acme": 1, "beta": 2}.get(tenant or "")
    return NodePartitions(node_id, state, tenant, key, reported)


def kinds(nodes: list[NodePartitions]) -> list[tuple[str, ViolationKind]]:
    return [(v.node.node_id, v.kind) for v in audit(nodes, OWNERS)]


def test_nodes_in_exactly_their_tenants_partition_or_none_are_clean() -> None:
    clean = [
        node("a", NodeState.ALLOCATED, "acme", (1,)),
        node("b", NodeState.DRAINING, "beta", (2,)),
        node("c", NodeState.READY, None, ()),
        # Held but cut off from its partition: nobody is exposed, so no violation.
        node("d", NodeState.ALLOCATED, "acme", ()),
        # Scrubbing: still held until released, its own tenant's partition is no leak yet.
        node("e", NodeState.SCRUBBING, "acme", (1,)),
    ]
    assert audit(clean, OWNERS) == []


def test_each_kind_is_found_with_the_tenants_named() -> None:
    nodes = [
        node("z-two", NodeState.ALLOCATED, "acme", (1, 2)),
        node("y-free", NodeState.READY, None, (2,)),
        node("x-other", NodeState.ALLOCATED, "acme", (2,)),
        node("w-nobody", NodeState.SCRUBBING, "beta", (9,)),
    ]
    found = audit(nodes, OWNERS)
    assert [(v.node.node_id, v.kind) for v in found] == [
        ("w-nobody", ViolationKind.ANOTHER_TENANTS_PARTITION),
        ("x-other", ViolationKind.ANOTHER_TENANTS_PARTITION),
        ("y-free", ViolationKind.FREE_NODE_IN_PARTITION),
        ("z-two", ViolationKind.TWO_PARTITIONS),
        ("z-two", ViolationKind.ANOTHER_TENANTS_PARTITION),
    ]
    messages = {(v.node.node_id, v.kind): v.message for v in found}
    assert messages["x-other", ViolationKind.ANOTHER_TENANTS_PARTITION] == (
        "held by acme (key 1), yet in beta's partition 2"
    )
    assert messages["y-free", ViolationKind.FREE_NODE_IN_PARTITION] == (
        "READY and held by no tenant, yet in beta's partition 2"
    )
    assert messages["z-two", ViolationKind.TWO_PARTITIONS] == "in 2 partitions: acme's partition 1, beta's partition 2"
    assert "partition 9 (no tenant's)" in messages["w-nobody", ViolationKind.ANOTHER_TENANTS_PARTITION]


def test_a_node_is_in_its_tenants_partition_only_while_it_works_for_it() -> None:
    assert expected(NodeState.ALLOCATED, 7) == (7,)
    assert expected(NodeState.DRAINING, 7) == (7,)
    for state in (NodeState.SCRUBBING, NodeState.READY, NodeState.QUARANTINED):
        assert expected(state, 7) == ()
    assert expected(NodeState.ALLOCATED, None) == ()

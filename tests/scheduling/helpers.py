"""Small clusters built by hand for the placement tests."""

from __future__ import annotations

from scheduling import NodeSpec

CPU = 64_000
MEMORY = 512_000


def node(
    node_id: str,
    gpus: int = 8,
    *,
    model: str = "H100",
    cpu: int = CPU,
    memory: int = MEMORY,
    rack: str = "r1",
    block: str = "b1",
    mig: bool = False,
) -> NodeSpec:
    """A node in zone z1 whose leaf switch is its rack's."""
    return NodeSpec(node_id, model, gpus, cpu, memory, zone="z1", block=block, rack=rack, leaf_switch=rack, mig=mig)

"""The scheduling cycle over part-node allocations, on both databases: several placed in one
cycle, on a node the cycle opens and then packs, with their holds, the node's move and their
usage written in the one transaction (on PostgreSQL the cycle locks that node as a free one)."""

from __future__ import annotations

from functools import partial

import scheduling
from services.allocations import commands
from services.allocations.requests import AllocationRequest
from services.allocations.scheduler import cycle
from services.auth.principal import CONTROL_PLANE
from services.nodes import commands as node_commands
from services.nodes.inventory import GpuModel, GpuSpec, Inventory
from services.store.engine import Database
from services.tenants import commands as tenant_commands


async def test_one_cycle_opens_a_node_and_packs_the_next_allocations_onto_it(store: Database) -> None:
    await tenant_commands.create(store, "acme", "")
    gpus = tuple(GpuSpec(f"GPU-n0-{g}", g) for g in range(8))
    await node_commands.register(store, CONTROL_PLANE, Inventory("n0", GpuModel.H100, gpus, "z", "r", "l"))
    await node_commands.complete_burn_in(store, CONTROL_PLANE, "n0", passed=True, detail="")
    waiting = []
    for request in (
        AllocationRequest("acme", GpuModel.H100, 0, "a", gpus=2),
        AllocationRequest("acme", GpuModel.H100, 0, "b", gpus=4),
        AllocationRequest("acme", GpuModel.H100, 0, "c", share_milli=500),
    ):
        waiting.append((await commands.create(store, request)).view.row.allocation_id)
    locking = store.dialect == "postgresql"
    made = await store.transact(partial(cycle, GpuModel.H100, scheduling.POLICIES["first-fit"], locking=locking))
    placed = {p.row.allocation_id: (p.node_id, p.gpus, p.opened) for p in made.parts}
    assert placed == {
        waiting[0]: ("n0", (0, 1), True),
        waiting[1]: ("n0", (2, 3, 4, 5), False),
        waiting[2]: ("n0", (6,), False),
    }
    views = [await commands.get(store, CONTROL_PLANE, a) for a in waiting]
    assert [(v.row.state, v.node_ids, len(v.holds)) for v in views] == [("ACTIVE", ("n0",), n) for n in (2, 4, 1)]

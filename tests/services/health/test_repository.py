"""What a health decision reads of a node: its strikes since it last returned to service."""

from __future__ import annotations

from functools import partial

from services.auth.principal import CONTROL_PLANE
from services.health import repository as repo
from services.health.policy import OFF_BUS, Observation
from services.nodes import commands as node_commands
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel, GpuSpec, Inventory
from services.nodes.transitions import NodeEvent
from services.store.engine import Database
from services.store.tx import Tx

NODE = "n1"
SECOND_US = 1_000_000


def returned(at_us: int) -> Tx[None]:
    row = yield from nodes_repo.get_row(NODE)
    event = NodeEvent.RETURN_TO_SERVICE
    yield from nodes_repo.record_event(row, event, reason="fixed", actor="operator:x", now_us=at_us)


async def test_a_return_to_service_clears_the_strikes_before_it(store: Database) -> None:
    gpus = tuple(GpuSpec(f"GPU-{NODE}-{i}", i) for i in range(8))
    await node_commands.register(store, CONTROL_PLANE, Inventory(NODE, GpuModel.H100, gpus, "z", "r", "l"))
    for at in (10, 20):
        await store.transact(partial(repo.record, NODE, [Observation(OFF_BUS, at, 3)]))
    seen = await store.query(repo.view(NODE, since_us=0, actor=CONTROL_PLANE.actor))
    assert seen is not None
    assert [s.at_s for s in seen.strikes] == [10, 20]
    await store.transact(partial(returned, 25 * SECOND_US))
    await store.transact(partial(repo.record, NODE, [Observation(OFF_BUS, 30, 3)]))
    seen = await store.query(repo.view(NODE, since_us=0, actor=CONTROL_PLANE.actor))
    assert seen is not None
    assert seen.strikes == [Observation(OFF_BUS, 30.0, 3)]


async def test_a_status_sent_again_stores_no_strike_twice(store: Database) -> None:
    gpus = tuple(GpuSpec(f"GPU-{NODE}-{i}", i) for i in range(8))
    await node_commands.register(store, CONTROL_PLANE, Inventory(NODE, GpuModel.H100, gpus, "z", "r", "l"))
    status = [Observation(OFF_BUS, 40, 3), Observation(OFF_BUS, 40, 5), Observation("xid:79", 12.5, 3)]
    for _ in range(2):  # the agent lost the answer and sent it again
        await store.transact(partial(repo.record, NODE, status))
    seen = await store.query(repo.view(NODE, since_us=0, actor=CONTROL_PLANE.actor))
    assert seen is not None
    assert seen.strikes == [
        Observation("xid:79", 12.5, 3),
        Observation(OFF_BUS, 40.0, 3),
        Observation(OFF_BUS, 40.0, 5),
    ]

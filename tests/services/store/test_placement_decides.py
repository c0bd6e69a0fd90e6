"""The placement policy chooses among every free node of the model, through the real create
path: a policy that picks otherwise than first fit gets other nodes, alone (both databases),
set-based in one SQLite group, and on PostgreSQL when a node it chose is locked by another
transaction. Were the candidates read cut to ``count`` by the SQL (``LIMIT``), every policy
would get the first nodes in fabric order and these tests would fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from services.allocations import commands, placement
from services.allocations.placement import Candidate
from services.allocations.requests import AllocationRequest
from services.auth.principal import CONTROL_PLANE
from services.errors import ResourceExhausted
from services.nodes import commands as node_commands
from services.nodes.inventory import GpuModel, GpuSpec, Inventory
from services.store.engine import Database
from services.tenants import commands as tenant_commands
from tests.conftest import backend

NODES = 6


def last_fit(candidates: Sequence[Candidate], count: int) -> list[str] | None:
    """The last ``count`` candidates in fabric order, the last one first."""
    if len(candidates) < count:
        return None
    ordered = sorted(candidates, key=lambda c: (c.zone, c.rack, c.leaf_switch, c.node_id), reverse=True)
    return [c.node_id for c in ordered[:count]]


@pytest.fixture(name="fleet")
async def fleet_store(store: Database) -> Database:
    """The store with tenant acme and READY H100 nodes n0..n5 in one rack (fabric order is id
    order), and an A100 node, a0, that no H100 placement may take."""
    await tenant_commands.create(store, "acme", "")
    nodes = [(f"n{i}", GpuModel.H100) for i in range(NODES)] + [("a0", GpuModel.A100)]
    for node_id, model in nodes:
        gpus = tuple(GpuSpec(f"GPU-{node_id}-{g}", g) for g in range(8))
        await node_commands.register(store, CONTROL_PLANE, Inventory(node_id, model, gpus, "z", "r", "l"))
        await node_commands.complete_burn_in(store, CONTROL_PLANE, node_id, passed=True, detail="")
    return store


async def create(store: Database, count: int, request_id: str) -> tuple[str, ...]:
    return (await commands.create(store, AllocationRequest("acme", GpuModel.H100, count, request_id))).view.node_ids


async def test_first_fit_is_the_policy_in_use(fleet: Database) -> None:
    """The reference the other tests differ from: first fit takes the first nodes in fabric order."""
    assert placement.POLICY is placement.first_fit
    assert await create(fleet, 1, "one") == ("n0",)
    assert await create(fleet, 2, "two") == ("n1", "n2")


async def test_another_policy_chooses_among_every_free_node(fleet: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Last fit, on either database: each create alone gets the last free nodes, which it
    could not if the read had been cut to the first ``count``."""
    monkeypatch.setattr(placement, "POLICY", last_fit)
    assert await create(fleet, 1, "one") == ("n5",)
    assert await create(fleet, 2, "two") == ("n4", "n3")
    assert await create(fleet, 3, "three") == ("n2", "n1", "n0")
    with pytest.raises(ResourceExhausted) as refused:
        await create(fleet, 1, "none left")
    assert refused.value.message == "1 READY H100 node(s) requested, 0 free; nothing was allocated"


async def test_another_policy_places_a_set_based_group(fleet: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Creates started together share one SQLite group and are placed set-based, each by the
    policy among the nodes the creates before it in the queue left."""
    writer = fleet._writer
    if writer is None:
        pytest.skip("SQLite only: groups exist only in its writer; PostgreSQL runs each create alone (tests above)")
    monkeypatch.setattr(placement, "POLICY", last_fit)
    before = writer.commits
    placed = list(await asyncio.gather(create(fleet, 1, "one"), create(fleet, 2, "two"), create(fleet, 1, "three")))
    assert writer.commits - before == 1, "the creates did not share one group: the set was not exercised"
    assert placed == [("n5",), ("n4", "n3"), ("n2",)]


@pytest.mark.skipif(
    backend() != "postgresql",
    reason="PostgreSQL row locks (runs in .ci/run's PostgreSQL pass); SQLite's writer holds the one write lock",
)
async def test_a_chosen_node_locked_elsewhere_is_chosen_around(
    fleet: Database, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node the policy chose that another transaction holds is passed over: the policy
    chooses again from the candidates without it, and the create does not wait."""
    monkeypatch.setattr(placement, "POLICY", last_fit)
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    holder = await asyncpg.connect(dsn)
    try:
        await holder.execute("BEGIN")
        await holder.execute("SELECT 1 FROM nodes WHERE node_id IN ('n5', 'n3') FOR UPDATE")
        assert await asyncio.wait_for(create(fleet, 2, "two"), 10) == ("n4", "n2")
        await holder.execute("ROLLBACK")
        assert await create(fleet, 1, "one") == ("n5",)
    finally:
        await holder.close()

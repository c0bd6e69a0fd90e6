"""The placement policy chooses among every free node of the model, through the real create
path: the policy configured for a pool decides which nodes an allocation gets, and a policy that
picks otherwise than first fit gets other nodes, alone (both databases), set-based in one SQLite
group, and on PostgreSQL when a node it chose is locked by another transaction. Were the
candidates read cut to ``count`` by the SQL (``LIMIT``), every policy would get the first nodes
in fabric order and these tests would fail.
"""

from __future__ import annotations

import asyncio

import asyncpg
import numpy as np
import pytest
from sqlalchemy.engine import make_url

import scheduling
from scheduling import Cluster, Placement, WholeNodes
from services.allocations import commands
from services.allocations.placement import DEFAULT_POLICIES, Policies
from services.allocations.requests import AllocationRequest
from services.auth.principal import CONTROL_PLANE
from services.errors import ResourceExhausted
from services.nodes import commands as node_commands
from services.nodes.inventory import GpuModel, GpuSpec, Inventory
from services.store.engine import Database
from services.tenants import commands as tenant_commands
from tests.conftest import backend

NODES = 6


def last_fit(cluster: Cluster, request: scheduling.Request) -> Placement | None:
    """The last ``count`` idle nodes in fabric order, the last one first."""
    assert isinstance(request, WholeNodes)
    idle = sorted((int(i) for i in np.flatnonzero(cluster.idle())), key=lambda i: int(cluster.rank[i]), reverse=True)
    if len(idle) < request.count:
        return None
    return Placement(request, tuple(cluster.nodes[i].node_id for i in idle[: request.count]))


class LastFit(Policies):
    """Every pool places with ``last_fit``, a policy of this test's own."""

    def of(self, gpu_model: str) -> scheduling.Policy:
        return last_fit


@pytest.fixture(name="fleet")
async def fleet_store(store: Database) -> Database:
    """The store with tenant acme and READY H100 nodes n0..n5 in one rack (fabric order is id
    order), n0 and n1 under leaf switch la and the rest under lb; and an A100 node, a0, that no
    H100 placement may take."""
    await tenant_commands.create(store, "acme", "")
    nodes = [(f"n{i}", GpuModel.H100) for i in range(NODES)] + [("a0", GpuModel.A100)]
    for node_id, model in nodes:
        gpus = tuple(GpuSpec(f"GPU-{node_id}-{g}", g) for g in range(8))
        leaf = "la" if node_id in ("n0", "n1") else "lb"
        await node_commands.register(store, CONTROL_PLANE, Inventory(node_id, model, gpus, "z", "r", leaf))
        await node_commands.complete_burn_in(store, CONTROL_PLANE, node_id, passed=True, detail="")
    return store


async def create(
    store: Database, count: int, request_id: str, policies: Policies = DEFAULT_POLICIES
) -> tuple[str, ...]:
    request = AllocationRequest("acme", GpuModel.H100, count, request_id, fail_if_unavailable=True)
    return (await commands.create(store, request, policies)).view.node_ids


async def test_first_fit_is_the_policy_unless_configured(fleet: Database) -> None:
    """The reference the other tests differ from: first fit takes the first nodes in fabric
    order, across the leaf switches' boundary."""
    assert await create(fleet, 3, "three") == ("n0", "n1", "n2")
    assert await create(fleet, 2, "two") == ("n3", "n4")


async def test_the_configured_policy_decides_which_nodes_an_allocation_gets(fleet: Database) -> None:
    """The H100 pool configured best fit, on either database: three nodes inside lb, the
    fullest block that holds them, then two inside la; first fit would have split the three."""
    best_fit = Policies({"H100": "best-fit"})
    assert await create(fleet, 3, "three", best_fit) == ("n2", "n3", "n4")
    assert await create(fleet, 2, "two", best_fit) == ("n0", "n1")
    assert await create(fleet, 1, "one", best_fit) == ("n5",)


async def test_another_policy_chooses_among_every_free_node(fleet: Database) -> None:
    """Last fit, on either database: each create alone gets the last free nodes, which it
    could not if the read had been cut to the first ``count``."""
    assert await create(fleet, 1, "one", LastFit()) == ("n5",)
    assert await create(fleet, 2, "two", LastFit()) == ("n4", "n3")
    assert await create(fleet, 3, "three", LastFit()) == ("n2", "n1", "n0")
    with pytest.raises(ResourceExhausted) as refused:
        await create(fleet, 1, "none left", LastFit())
    assert (
        refused.value.message == "waiting for capacity: 0 free H100 node(s), 1 needed whole; short by 1;"
        " nothing was allocated (fail_if_unavailable)"
    )


@pytest.mark.skipif(
    backend() != "postgresql",
    reason="PostgreSQL row locks (runs in .ci/run's PostgreSQL pass); SQLite's writer holds the one write lock",
)
async def test_a_chosen_node_locked_elsewhere_is_chosen_around(fleet: Database, database_url: str) -> None:
    """A node the policy chose that another transaction holds is passed over: the policy
    chooses again from the candidates without it, and the create does not wait."""
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    holder = await asyncpg.connect(dsn)
    try:
        await holder.execute("BEGIN")
        await holder.execute("SELECT 1 FROM nodes WHERE node_id IN ('n5', 'n3') FOR UPDATE")
        assert await asyncio.wait_for(create(fleet, 2, "two", LastFit()), 10) == ("n4", "n2")
        await holder.execute("ROLLBACK")
        assert await create(fleet, 1, "one", LastFit()) == ("n5",)
    finally:
        await holder.close()

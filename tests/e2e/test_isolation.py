"""Fabric isolation against the real server and simulated agents: each tenant has its own
partition key, a node's agent joins exactly its tenant's partition while the node is allocated
and none after the scrub, and the isolation audit (RPC and CLI) finds every kind of violation
a test plants, and none in a clean fleet."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from clients.agent.control import Fault
from clients.agent.fabric import SimulatedFabric
from clients.agent.runner import NodeAgent
from services.store.tx import Sql, Tx
from tests.clients.cli.test_commands import document
from tests.clients.cli.test_connection import gpucloud
from tests.conftest import RunningControlPlane, until
from tests.e2e.test_health import ready_fleet


async def partition_keys(plane: RunningControlPlane) -> dict[str, int]:
    def read() -> Tx[dict[str, int]]:
        found = yield Sql("SELECT tenant_id, partition_key FROM partition_keys")
        return {str(tenant): int(key) for tenant, key in found.rows}

    store = plane.plane.database
    assert store is not None
    return await store.query(read())


async def reported(plane: RunningControlPlane, node_id: str) -> list[int]:
    """The partitions the node's agent last reported, from the status the control plane stored."""

    def read() -> Tx[str]:
        found = (yield Sql("SELECT status_json FROM node_status WHERE node_id = :id", {"id": node_id})).first()
        assert found is not None
        return str(found[0])

    store = plane.plane.database
    assert store is not None
    return list(json.loads(await store.query(read())).get("partitionKeys", []))


async def test_tenants_partitions_follow_their_nodes_and_the_audit_finds_each_violation(
    tmp_path: Path, database_url: str
) -> None:
    async with ready_fleet(tmp_path, database_url, 4) as (plane, fleet, operator):
        await operator.create_tenant("acme")
        await operator.create_tenant("beta")
        keys = await partition_keys(plane)
        assert sorted(keys) == ["acme", "beta"]
        assert keys["acme"] != keys["beta"]
        acme = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
        beta = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="beta")
        [acme_node], [beta_node] = acme.node_ids, beta.node_ids
        free = sorted(set(fleet.nodes) - {acme_node, beta_node})[0]

        # Each allocated node's agent joins its tenant's partition, and only that.
        async def joined() -> bool:
            return await reported(plane, acme_node) == [keys["acme"]] and await reported(plane, beta_node) == [
                keys["beta"]
            ]

        await until(joined, timeout=30)

        # An agent restarting on the held node is told its tenant's partition at registration.
        simulated = fleet.nodes[acme_node]
        restarted_fabric = SimulatedFabric()
        restarted = NodeAgent(
            plane.address,
            simulated.identity,
            fleet.tokens[acme_node],
            simulated.gpus,
            simulated.work,
            fabric=restarted_fabric,
            interval_s=0.3,
        )
        running = asyncio.create_task(restarted.run())
        try:
            await restarted.wait_registered()
            assert list(restarted.instructions.partition_keys) == [keys["acme"]]
            assert restarted_fabric.partitions() == (keys["acme"],)
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)

        clean = await operator.audit_isolation()
        assert (clean.nodes_checked, clean.violations) == (4, [])
        connect = ["--addr", plane.address, "--token", plane.operator_token]
        code, output = await asyncio.to_thread(gpucloud, *connect, "audit", "isolation")
        assert code == 0, output
        assert "no violation: 4 node(s) checked" in output

        # Planted: the acme node keeps beta's partition too; a free node keeps acme's.
        fleet.inject(acme_node, Fault.PARTITION_LEAK, key=keys["beta"])
        fleet.inject(free, Fault.PARTITION_LEAK, key=keys["acme"])
        wanted = sorted(
            [
                (acme_node, "TWO_PARTITIONS"),
                (acme_node, "ANOTHER_TENANTS_PARTITION"),
                (free, "FREE_NODE_IN_PARTITION"),
            ]
        )

        async def found_all() -> bool:
            audit = await operator.audit_isolation()
            return sorted((v.node_id, v.kind) for v in audit.violations) == wanted

        await until(found_all, timeout=30)
        audit = await operator.audit_isolation()
        by_kind = {(v.node_id, v.kind): v for v in audit.violations}
        other = by_kind[acme_node, "ANOTHER_TENANTS_PARTITION"]
        assert (other.tenant_id, other.expected_partition_key, other.state) == ("acme", keys["acme"], "ALLOCATED")
        assert other.reported_partition_keys == tuple(sorted([keys["acme"], keys["beta"]]))
        assert other.message == f"held by acme (key {keys['acme']}), yet in beta's partition {keys['beta']}"
        assert by_kind[free, "FREE_NODE_IN_PARTITION"].message == (
            f"READY and held by no tenant, yet in acme's partition {keys['acme']}"
        )
        code, output = await asyncio.to_thread(gpucloud, *connect, "audit", "isolation", "--json")
        assert code == 4, output
        listed = document(output)
        assert sorted((v["node_id"], v["kind"]) for v in listed["violations"]) == wanted
        code, output = await asyncio.to_thread(gpucloud, *connect, "audit", "isolation")
        assert code == 4, output
        assert "3 violation(s) on 4 node(s) checked" in output

        # Mended and released: the scrub leaves the tenant's partition, and the fleet is clean.
        fleet.inject(acme_node, Fault.CLEAR)
        fleet.inject(free, Fault.CLEAR)
        operation = await operator.cancel_allocation(acme.allocation_id)
        await operator.wait_operation(operation.name, timeout=30)

        async def scrubbed_out() -> bool:
            node = await operator.get_node(acme_node)
            return node.state == "READY" and await reported(plane, acme_node) == []

        await until(scrubbed_out, timeout=30)

        async def clean_again() -> bool:
            return (await operator.audit_isolation()).violations == []

        await until(clean_again, timeout=30)

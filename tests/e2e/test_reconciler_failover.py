"""Two ``gpucloud serve`` processes on one PostgreSQL: only the lease holder reconciles, and
after a SIGKILL of it the other takes the lease over within the lease time and carries on."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from clients import AsyncClient
from gpucloud.v1 import agent_pb2
from services.store.tx import Sql, Tx
from tests.conftest import backend, open_database, until
from tests.e2e.agent_wire import WireAgent, burn_in
from tests.e2e.test_billing_crash import RATES, Server, reaped, start_server

pytestmark = pytest.mark.skipif(
    backend() != "postgresql",
    reason="replicas share a PostgreSQL database (runs in .ci/run's PostgreSQL pass); a second server on "
    "one SQLite data directory is refused",
)

LEASE_S = 2.0
FLEET_OPTIONS = ("--lease-duration", str(LEASE_S), "--heartbeat-interval", "0.5")


def reconciled(log: Path) -> list[str]:
    """The nodes a server's log says it moved."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [line["node_id"] for line in lines if line.get("event") == "node_reconciled"]


async def holder_pid(database_url: str) -> int | None:
    """The pid of the process holding the reconciler's lease, if any holds it."""
    async with open_database(database_url) as database:
        rows = await database.query(_holder())
    return None if not rows else int(rows[0][0].split("/")[1])


def _holder() -> Tx[list[Sequence[Any]]]:
    result = yield Sql("SELECT holder FROM leases WHERE name = 'node-reconciler'")
    return result.rows


async def ready_node(operator: AsyncClient, via: Server, node_id: str) -> None:
    """Register an agent node through ``via`` and pass its burn-in (a fleet of one is its own median)."""
    async with await WireAgent.minted(operator, via.address, node_id) as agent:
        await agent.register()
        await agent.report(burn_in(await agent.action(agent_pb2.ACTION_KIND_BURN_IN)))

        async def ready() -> bool:
            return (await operator.get_node(node_id)).state == "READY"

        await until(ready, timeout=30)


async def test_one_replica_reconciles_and_the_other_takes_over(tmp_path: Path, database_url: str) -> None:
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps(RATES))
    logs = tmp_path / "a.log", tmp_path / "b.log"
    servers: list[Server] = []
    with reaped(servers):
        first = await start_server(tmp_path / "a", database_url, rates, logs[0], scrub_seconds=0.1, extra=FLEET_OPTIONS)
        servers.append(first)

        async def first_leads() -> bool:
            return await holder_pid(database_url) == first.process.pid

        await until(first_leads, timeout=30)
        second = await start_server(
            tmp_path / "b", database_url, rates, logs[1], scrub_seconds=0.1, extra=FLEET_OPTIONS
        )
        servers.append(second)
        async with AsyncClient(second.address, first.token, timeout=15) as operator:
            # Registered through the standby, reconciled by the leader.
            await ready_node(operator, second, "node-1")
            assert "node-1" in reconciled(logs[0])
            assert reconciled(logs[1]) == []
            assert await holder_pid(database_url) == first.process.pid

            first.process.send_signal(signal.SIGKILL)
            first.process.wait()
            killed = time.monotonic()

            async def second_leads() -> bool:
                return await holder_pid(database_url) == second.process.pid

            await until(second_leads, timeout=30)
            took = time.monotonic() - killed
            print(f"takeover {took:.2f} s after SIGKILL (lease {LEASE_S} s)")
            # The lease runs out at most LEASE_S after the dead leader's last renewal, and the
            # standby tries every LEASE_S / 7.5: one try late at most, and a little for the machine.
            assert took <= LEASE_S + LEASE_S / 7.5 + 1.0, took
            await ready_node(operator, second, "node-2")
            assert "node-2" in reconciled(logs[1])

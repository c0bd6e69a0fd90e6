"""THE crash test: SIGKILL the control plane right after a cancel is accepted, restart it on the
same data a while later, and the invoice still bills every GPU exactly from its start to its
stop: the cancel's acceptance, since the scrub and the outage are the provider's time.

The control plane runs as a real subprocess (``gpucloud serve``), so the kill is a real one:
no shutdown hook runs, in-flight work is lost, and only what reached the database survives.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from subprocess import STDOUT, Popen
from typing import Any, cast

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from typer.testing import CliRunner

from accounting.model import datetime_to_us, us_to_seconds
from accounting.periods import BillingPeriod, period_of
from clients import Allocation, AsyncClient
from clients.cli.app import app
from tests.conftest import free_port, gpucloud_command, register_ready_nodes

GPUS_PER_NODE = 8
RATES = {"currency": "USD", "gpu_hour": {"H100": {"on_demand": "2.00"}}}
START_TIMEOUT = 60.0


@dataclass
class Server:
    process: Popen[bytes]
    address: str
    token: str


def spawn(
    data_dir: Path,
    database_url: str,
    rates: Path,
    log: Path,
    address: str,
    scrub_seconds: float,
    extra: Sequence[str] = (),
) -> Popen[bytes]:
    command = [
        *gpucloud_command(),
        "serve",
        "--data-dir",
        str(data_dir),
        "--listen",
        address,
        "--database-url",
        database_url,
        "--scrub-seconds",
        str(scrub_seconds),
        "--rates",
        str(rates),
        "--log-format",
        "json",
        *extra,
    ]
    with log.open("ab") as sink:
        return Popen(command, stdout=sink, stderr=STDOUT)


def failed(process: Popen[bytes], log: Path, why: str) -> AssertionError:
    if process.poll() is None:
        process.kill()
    return AssertionError(f"gpucloud serve {why}:\n{log.read_text()}")


async def start_server(
    data_dir: Path,
    database_url: str,
    rates: Path,
    log: Path,
    *,
    scrub_seconds: float,
    extra: Sequence[str] = (),
    address: str | None = None,
) -> Server:
    """``gpucloud serve`` (with ``extra`` options) on ``address`` (default: a fresh port);
    returns once its health check says SERVING. Its token is "" when the database was
    bootstrapped by another server."""
    address = address or f"127.0.0.1:{free_port()}"
    process = spawn(data_dir, database_url, rates, log, address, scrub_seconds, extra)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                raise failed(process, log, f"exited with {process.returncode}")
            try:
                # wait_for_ready: block until the port accepts connections, up to one second.
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0, wait_for_ready=True)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    break
            except grpc.aio.AioRpcError:
                pass
            if loop.time() > deadline:
                raise failed(process, log, "did not start")
    minted = data_dir / "operator.token"
    return Server(process, address, read_token(data_dir) if minted.exists() else "")


def read_token(data_dir: Path) -> str:
    return (data_dir / "operator.token").read_text().strip()


@contextmanager
def reaped(servers: list[Server]) -> Iterator[None]:
    """Kill and wait for every server started inside, whatever happens."""
    try:
        yield
    finally:
        for server in servers:
            if server.process.poll() is None:
                server.process.kill()
            server.process.wait(timeout=30)


def covered_periods(allocations: list[Allocation]) -> list[BillingPeriod]:
    """Every billing period from the first create to the last release (usually one)."""
    first = period_of(min(datetime_to_us(a.admit_time) for a in allocations if a.admit_time))
    last = period_of(max(datetime_to_us(a.release_time) for a in allocations if a.release_time))
    periods = [first]
    while periods[-1] < last:
        periods.append(periods[-1].next())
    return periods


def cli(*args: str) -> str:
    """Run one `gpucloud` command in this process; its stdout, or a failure showing stderr."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, f"gpucloud {' '.join(args)} -> {result.exit_code}\n{result.output}"
    return result.stdout


async def test_a_killed_control_plane_bills_every_gpu_exactly_once(tmp_path: Path, database_url: str) -> None:
    data_dir, log = tmp_path / "data", tmp_path / "serve.log"
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps(RATES))
    servers: list[Server] = []
    with reaped(servers):
        first = await start_server(data_dir, database_url, rates, log, scrub_seconds=0.5)
        servers.append(first)
        async with AsyncClient(first.address, first.token, timeout=15) as operator:
            node_ids = await register_ready_nodes(operator, 4)
            await operator.create_tenant("acme")
            created = [
                await operator.create_allocation(gpu_model="H100", node_count=n, tenant_id="acme") for n in (1, 2, 1)
            ]
            victim = created[0]
            cancel = await operator.cancel_allocation(victim.allocation_id)
            # Accepted, not done: the nodes are still scrubbing when the process dies.
            first.process.send_signal(signal.SIGKILL)
        assert cancel.done is False
        assert first.process.wait(timeout=30) == -signal.SIGKILL
        # The outage lasts until the restart: none of it may be billed to the tenant, who
        # gave the node back.

        second = await start_server(data_dir, database_url, rates, log, scrub_seconds=0.05)
        servers.append(second)
        async with AsyncClient(second.address, second.token, timeout=15) as operator:
            finished = [await operator.wait_operation(cancel.name, timeout=30)]
            rest = [await operator.cancel_allocation(a.allocation_id) for a in created[1:]]
            finished += [await operator.wait_operation(operation.name, timeout=30) for operation in rest]
            final = [await operator.get_allocation(a.allocation_id) for a in created]
            periods = covered_periods(final)
            invoices = [await operator.get_invoice(p.name, tenant_id="acme") for p in periods]
            events = [e async for page in operator.iter_usage_event_pages(tenant_id="acme") for e in page]

        # What the API itself said about each allocation is the truth the invoice must match.
        assert all(a.state == "CANCELLED" and a.release_time is not None for a in final)
        # The operations and the allocations agree on when the nodes came back.
        assert all(op.done for op in finished)
        assert [op.release_time for op in finished] == [a.release_time for a in final]
        # Billing stopped when each cancel was accepted, before the scrub (and the outage).
        cancelled = [(a, a.cancel_time) for a in final if a.cancel_time is not None]
        assert len(cancelled) == len(final)
        assert all(cancel_time < a.release_time for a, cancel_time in cancelled if a.release_time)
        # Billing starts at the admission, which the API returns as admit_time.
        expected = sum(
            (
                us_to_seconds(datetime_to_us(stop) - datetime_to_us(cast(datetime, a.admit_time)))
                * GPUS_PER_NODE
                * a.node_count
                for a, stop in cancelled
            ),
            Decimal(0),
        )
        billed = sum((line.gpu_seconds for invoice in invoices for line in invoice.lines), Decimal(0))
        assert billed == expected
        assert [a for invoice in invoices for a in invoice.anomalies] == []
        # The last period's invoice read the whole log: every event billed or outside it, none lost.
        last = invoices[-1].reconciliation
        assert last.events_in == len(events)
        assert last.events_billed + last.events_outside_period == len(events)
        assert last.events_in_anomalies == 0

        # No duplicate, nothing missing: one start at create and one stop at the cancel per GPU.
        gpus_held = sum(a.node_count for a in final) * GPUS_PER_NODE
        assert gpus_held == len(node_ids) * GPUS_PER_NODE
        assert len({e.event_id for e in events}) == len(events) == 2 * gpus_held
        assert len({e.gpu_uuid for e in events}) == gpus_held
        assert Counter(e.kind for e in events) == {"START": gpus_held, "STOP": gpus_held}
        by_allocation = {a.allocation_id: a for a in final}
        for e in events:
            allocation = by_allocation[e.allocation_id]
            assert e.node_id in allocation.node_ids
            moment = allocation.admit_time if e.kind == "START" else allocation.cancel_time
            assert e.event_time == moment

        # The audit round trip, through the command line: export, recompute offline, compare.
        def audit(period: BillingPeriod) -> tuple[dict[str, Any], dict[str, Any]]:
            exported = tmp_path / f"acme-{period.name}.jsonl"
            connect = ["--addr", second.address, "--token", second.token]
            cli(
                *connect, "usage", "export", "--tenant", "acme", "--invoice-period", period.name, "--out", str(exported)
            )
            offline = json.loads(
                cli(
                    "invoice",
                    "--events",
                    str(exported),
                    "--rates",
                    str(rates),
                    "--start",
                    f"{period.name}-01T00:00:00Z",
                    "--end",
                    f"{period.next().name}-01T00:00:00Z",
                    "--json",
                )
            )
            online = json.loads(cli(*connect, "invoice", "--tenant", "acme", "--period", period.name, "--json"))
            return online, offline

        for period in periods:
            online, offline = await asyncio.to_thread(audit, period)
            (tenant_invoice,) = offline["invoices"]
            assert online["lines"] == tenant_invoice["lines"]
            assert online["total"] == tenant_invoice["total"]
            assert online["anomalies"] == offline["anomalies"] == []

"""Billing through an outage of the control plane: a GPU falls off the bus while the control
plane is down (SIGKILL); its agent keeps the XID with the time the driver raised it, in its
journal on disk, and reports it once the control plane is back (restarted itself meanwhile or
not), so the node is taken from its allocation and its GPUs stop billing at the fault, not at
the restart; every other GPU bills exactly, nothing twice and nothing missing."""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from accounting.model import datetime_to_us, us_to_seconds
from clients import AsyncClient
from clients.agent.fleet import SimulatedFleet
from clients.agent.journal import Journal, journal_path
from tests.conftest import free_port, until
from tests.e2e.test_billing_crash import RATES, Server, reaped, start_server
from tests.e2e.test_health import fault_time, once_replaced

OPTIONS = ("--heartbeat-interval", "0.3", "--lease-duration", "2", "--missed-beats", "10")
GPUS = 8


def seconds(start: datetime | None, end: datetime | None) -> Decimal:
    assert start is not None
    assert end is not None
    return us_to_seconds(datetime_to_us(end) - datetime_to_us(start))


@pytest.mark.parametrize("agents_restart", [False, True], ids=["agents-run-on", "agents-restart"])
async def test_a_fault_during_an_outage_stops_billing_when_it_happened(
    tmp_path: Path, database_url: str, agents_restart: bool
) -> None:
    """The agents run on through the outage, keeping the XID; or they stop too, after the fault,
    and agents started afresh (their simulated GPUs know nothing of it) replay it from the
    journals on disk."""
    data_dir, log = tmp_path / "data", tmp_path / "serve.log"
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps(RATES))
    address = f"127.0.0.1:{free_port()}"
    servers: list[Server] = []
    with reaped(servers):
        first = await start_server(
            data_dir, database_url, rates, log, scrub_seconds=0.1, extra=OPTIONS, address=address
        )
        servers.append(first)
        journals = tmp_path / "journals"

        def simulated_fleet(tokens: dict[str, str] | None = None) -> SimulatedFleet:
            return SimulatedFleet(
                address,
                4,
                tokens=tokens,
                interval_s=0.3,
                seed=3,
                burn_in_seconds=0.05,
                scrub_seconds=0.05,
                telemetry=False,
                journal_dir=journals,
            )

        fleet = simulated_fleet()
        await fleet.mint_tokens(first.token)
        running = asyncio.create_task(fleet.run())
        try:
            async with AsyncClient(address, first.token, timeout=15) as operator:

                async def all_ready() -> bool:
                    nodes = (await operator.list_nodes()).items
                    return len(nodes) == 4 and {n.state for n in nodes} == {"READY"}

                await until(all_ready, timeout=60)
                await operator.create_tenant("acme")
                allocation = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
            kept, faulty = allocation.node_ids

            first.process.send_signal(signal.SIGKILL)
            assert first.process.wait(timeout=30) == -signal.SIGKILL
            failed_before = fleet.stats.reports_failed
            raised = fault_time(fleet, faulty, gpu=2, code=79)

            async def tried_to_report() -> bool:
                # A report failed after the fault was journaled (an earlier one may have failed
                # too: one re-sending a result still named, say).
                pending = [e.code for e in Journal(journal_path(journals, faulty)).pending]
                return pending == [79] and fleet.stats.reports_failed > failed_before

            await until(tried_to_report, timeout=30)
            if agents_restart:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
                assert [e.code for e in Journal(journal_path(journals, faulty)).pending] == [79]
                fleet = simulated_fleet(fleet.tokens)
                running = asyncio.create_task(fleet.run())

            second = await start_server(
                data_dir, database_url, rates, log, scrub_seconds=0.1, extra=OPTIONS, address=address
            )
            servers.append(second)
            async with AsyncClient(address, first.token, timeout=15) as operator:
                replaced = await once_replaced(operator, allocation.allocation_id)
                [made] = replaced.replacements
                assert made.removed_node_id == faulty
                assert made.spare_node_id is not None
                assert made.time is not None
                assert raised < made.time
                operation = await operator.cancel_allocation(allocation.allocation_id)
                await operator.wait_operation(operation.name, timeout=30)
                final = await operator.get_allocation(allocation.allocation_id)
                period = final.create_time.strftime("%Y-%m") if final.create_time else ""
                invoice = await operator.get_invoice(period, tenant_id="acme")
                events = [e async for page in operator.iter_usage_event_pages(tenant_id="acme") for e in page]
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)

    # The faulty GPUs stop when the driver raised the XID, during the outage; the spare's start
    # at the replacement, after the restart; the kept node's run until the cancel.
    stops = {(e.node_id, e.event_time) for e in events if e.kind == "STOP"}
    assert stops == {(faulty, raised), (kept, final.cancel_time), (made.spare_node_id, final.cancel_time)}
    starts = {(e.node_id, e.event_time) for e in events if e.kind == "START"}
    assert starts == {
        (kept, allocation.admit_time),
        (faulty, allocation.admit_time),
        (made.spare_node_id, made.spare_time),
    }
    assert len(events) == 6 * GPUS  # a start and a stop per GPU of three nodes: nothing twice
    expected = GPUS * (
        seconds(allocation.admit_time, final.cancel_time)
        + seconds(allocation.admit_time, raised)
        + seconds(made.spare_time, final.cancel_time)
    )
    billed = sum((line.gpu_seconds for line in invoice.lines), Decimal(0))
    assert billed == expected
    assert invoice.anomalies == ()

"""``gpucloud demo``: the main job end to end on embedded defaults.

Starts a real control plane (SQLite in a throwaway data directory unless ``--data-dir`` names
one, a free loopback port), registers a small simulated fleet, creates a tenant, allocates,
shows idempotency and an all-or-nothing capacity refusal, lists, writes and queries metrics
(the tenant sees its node's samples only since its allocation), cancels and waits for the
release, and shows the tenant's invoice for the month, printing each step.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from rich.cells import cell_len
from rich.progress import Progress
from rich.rule import Rule
from rich.text import Text

from clients.async_client import AsyncClient
from clients.cli import render
from clients.cli.billing import invoice_table, reconciliation_line
from clients.cli.metrics import result_table
from clients.errors import ResourceExhaustedError
from clients.metrics import NodeSamples
from clients.request_ids import new_request_id
from services.log_config import configure
from services.server import ControlPlane, ServerConfig

# (node id, model, zone, rack, leaf switch)
FLEET = [
    ("h100-a-01", "H100", "zone-a", "rack-a1", "leaf-a1"),
    ("h100-a-02", "H100", "zone-a", "rack-a1", "leaf-a1"),
    ("h100-a-03", "H100", "zone-a", "rack-a2", "leaf-a2"),
    ("h100-a-04", "H100", "zone-a", "rack-a2", "leaf-a2"),
    ("h200-b-01", "H200", "zone-b", "rack-b1", "leaf-b1"),
    ("h200-b-02", "H200", "zone-b", "rack-b1", "leaf-b1"),
]


def step(title: str) -> None:
    """Print a rule headed ``title``: the start of one step of the walkthrough. A title too
    long for the terminal goes on lines of its own above the rule (a rule would cut it short)."""
    heading = Text(title, style="bold")
    if cell_len(title) + 6 <= render.console.width:
        render.console.print(Rule(heading, align="left"))
    else:
        render.console.print(heading)
        render.console.print(Rule())


async def run_demo(data_dir: Path | None = None, *, scrub_seconds: float = 0.5) -> None:
    """Start a control plane on a free loopback port with its data in ``data_dir`` (default: a temporary
    directory, removed at the end), walk through the demo, and stop the control plane even if a step fails."""
    configure("warning", "console")
    with tempfile.TemporaryDirectory(prefix="gpucloud-demo-") as scratch:
        config = ServerConfig(
            data_dir=data_dir or Path(scratch), listen="127.0.0.1:0", scrub_seconds=scrub_seconds, grace_seconds=0.5
        )
        plane = ControlPlane(config)
        await plane.start()
        try:
            await _walkthrough(plane)
        finally:
            await plane.stop()


async def _walkthrough(plane: ControlPlane) -> None:
    console = render.console
    step("1. Control plane")
    console.print(f"serving on [bold]{plane.address}[/bold], data in {plane.config.data_dir}")
    console.print(f"operator token written to {plane.operator_token_path}")
    operator_token = plane.operator_token_path.read_text().strip()

    async with AsyncClient(plane.address, operator_token) as operator:
        step("2. Register the fleet and pass burn-in")
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("registering nodes", total=len(FLEET))
            for node_id, model, zone, rack, leaf in FLEET:
                uuids = [f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node_id}.{i}')}" for i in range(8)]
                await operator.register_node(
                    node_id, gpu_model=model, gpu_uuids=uuids, zone=zone, rack=rack, leaf_switch=leaf
                )
                await operator.complete_burn_in(node_id, detail="simulated burn-in passed")
                progress.advance(task)
        console.print(render.nodes_table((await operator.list_nodes()).items, "Fleet"))

        step("3. Create a tenant")
        created = await operator.create_tenant("acme", "Acme Research")
        console.print(render.tenants_table([created.tenant], "Tenant"))
        console.print("tenant token issued (stored hashed on the server)")

    async with AsyncClient(plane.address, created.token) as tenant:
        step("4. Allocate 2 H100 nodes (idempotent by request_id)")
        request_id = new_request_id()
        allocation = await tenant.create_allocation(gpu_model="H100", node_count=2, request_id=request_id)
        retry = await tenant.create_allocation(gpu_model="H100", node_count=2, request_id=request_id)
        console.print(render.allocations_table([allocation], "Allocated"))
        same = retry.allocation_id == allocation.allocation_id
        console.print(
            f"retry with the same request_id returned {retry.allocation_id}: "
            f"{'the same allocation' if same else 'A DIFFERENT ONE (bug)'}"
            f"{', replayed from its record (nothing new allocated)' if retry.replayed else ''}"
        )

        step("5. Ask for more than is free: all or nothing")
        try:
            await tenant.create_allocation(gpu_model="H100", node_count=3)
            console.print("[red]unexpectedly allocated[/red]")
        except ResourceExhaustedError as err:
            console.print(f"refused as expected: {err}")

        step("6. List")
        console.print(render.allocations_table((await tenant.list_allocations()).items))

        step("7. Metrics: the operator sees a node's history, its tenant only the time it holds it")
        async with AsyncClient(plane.address, operator_token) as operator:
            await _metrics(operator, tenant, allocation.node_ids[0])

    async with AsyncClient(plane.address, operator_token) as operator:
        console.print(render.nodes_table((await operator.list_nodes(gpu_model="H100")).items, "H100 nodes"))

        step("8. Cancel: accepted at once, done when the nodes are scrubbed and released")
        async with AsyncClient(plane.address, created.token) as tenant:
            operation = await tenant.cancel_allocation(allocation.allocation_id)
            console.print(render.operations_table([operation], "Cancel accepted"))
            with console.status("waiting for the release..."):
                operation = await tenant.wait_operation(operation.name, timeout=60)
            console.print(render.operations_table([operation], "Cancel done"))
            if not operation.done:
                raise RuntimeError("the cancel operation did not finish within 60 s")
        console.print(render.nodes_table((await operator.list_nodes(gpu_model="H100")).items, "H100 nodes"))
        events = (await operator.list_node_events(allocation.node_ids[0])).items
        console.print(render.node_events_table(events, f"Why {allocation.node_ids[0]} is READY"))

        step("9. Invoice: billed from durable usage events, GPU by GPU, from hand-over to release")
        async with AsyncClient(plane.address, created.token) as tenant:
            invoice = await tenant.get_invoice(datetime.now(UTC).strftime("%Y-%m"))
        console.print(invoice_table(invoice))
        console.print(reconciliation_line(invoice))
    step("Done")


def _fleet_pushes(at_ms: list[int], busy: set[str], seed: int) -> list[NodeSamples]:
    """Plausible per-GPU power, temperature and utilization for every node at each instant."""
    rng = np.random.default_rng(seed)
    pushes = []
    for at in at_ms:
        for node_id, *_ in FLEET:
            load = 0.9 if node_id in busy else 0.1
            util = np.clip(rng.normal(load * 100, 5, 8), 0, 100)
            gpus = {
                i: {"power_w": round(90 + 6 * u, 1), "temp_c": round(35 + 0.45 * u, 1), "util_pct": round(u, 1)}
                for i, u in enumerate(util.tolist())
            }
            pushes.append(NodeSamples(node_id, at, gpus))
    return pushes


async def _metrics(operator: AsyncClient, tenant: AsyncClient, node_id: str) -> None:
    """Five minutes of fleet history, a few live pushes, and one node's power as each side sees it."""
    console = render.console
    now = time.time_ns() // 1_000_000
    history = [now - 300_000 + i * 10_000 for i in range(30)]
    written = (await operator.write_samples(_fleet_pushes(history, set(), seed=1))).samples_written
    live: list[int] = []
    for i in range(5):
        await asyncio.sleep(0.05)
        live.append(time.time_ns() // 1_000_000)
        written += (await operator.write_samples(_fleet_pushes(live[-1:], {node_id}, seed=2 + i))).samples_written
    console.print(f"wrote {written} samples: 5 minutes of history and 5 live pushes for {len(FLEET)} nodes x 8 GPUs")
    start, end = history[0], live[-1] + 1
    everything = await operator.query_metrics(start=start, end=end, node_ids=[node_id], gpu_indexes=[0])
    console.print(result_table(everything, f"{node_id} GPU 0 as the operator sees it"))
    held = await tenant.query_metrics(start=start, end=end, node_ids=[node_id], gpu_indexes=[0])
    console.print(result_table(held, f"{node_id} GPU 0 as its tenant sees it: only since its allocation"))

"""``gpucloud demo``: the main job end to end on embedded defaults.

Starts a real control plane (SQLite in a throwaway data directory unless ``--data-dir`` names
one, a free loopback port) and a simulated agent for each node of a small fleet: the agents
register their nodes, run burn-in (one node 20% slow, which the control plane fails against the
fleet median) and push their GPUs' telemetry. Then it creates a tenant, allocates, shows
idempotency and an allocation that waits PENDING for capacity with its reasons, lists, queries
metrics (the tenant sees its node's samples only since its allocation), makes a GPU of the
allocation fall off the bus (the health controller pulls the node and gives the allocation a
spare, with the evidence), cancels
and waits for the release and the agents' scrub, and shows the tenant's invoice for the month,
printing each step.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from rich.cells import cell_len
from rich.progress import Progress
from rich.rule import Rule
from rich.text import Text

from clients.agent.fabric import SimulatedFabric
from clients.agent.runner import NodeAgent, NodeIdentity
from clients.agent.simulated import SimulatedGpus
from clients.agent.work import SimulatedWork
from clients.async_client import AsyncClient
from clients.cli import render
from clients.cli.billing import invoice_table, reconciliation_line
from clients.cli.metrics import result_table
from clients.errors import ResourceExhaustedError
from clients.models import Allocation
from clients.request_ids import new_request_id
from services.fleet.config import FleetConfig
from services.log_config import configure
from services.server import ControlPlane, ServerConfig

FLEET = [
    NodeIdentity("h100-a-01", "H100", "zone-a", "rack-a1", "leaf-a1"),
    NodeIdentity("h100-a-02", "H100", "zone-a", "rack-a1", "leaf-a1"),
    NodeIdentity("h100-a-03", "H100", "zone-a", "rack-a2", "leaf-a2"),
    NodeIdentity("h100-a-04", "H100", "zone-a", "rack-a2", "leaf-a2"),
    NodeIdentity("h100-b-01", "H100", "zone-b", "rack-b1", "leaf-b1"),
    NodeIdentity("h100-b-02", "H100", "zone-b", "rack-b1", "leaf-b1"),
]
# Its burn-in measures 80% of the others' figures: the control plane fails it.
SLOW_NODE = "h100-b-02"
# The agents beat, and push telemetry, every second; the control plane tells them so.
DEMO_FLEET = FleetConfig(heartbeat_interval_s=1.0, resync_s=1.0, directives_refresh_s=0.2)

T = TypeVar("T")


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
    # The control plane logs its health decisions as warnings; the walkthrough shows them as tables.
    configure("error", "console")
    with tempfile.TemporaryDirectory(prefix="gpucloud-demo-") as scratch:
        config = ServerConfig(
            data_dir=data_dir or Path(scratch),
            listen="127.0.0.1:0",
            scrub_seconds=scrub_seconds,
            grace_seconds=0.5,
            fleet=DEMO_FLEET,
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

    async with AsyncClient(plane.address, operator_token) as operator, asyncio.TaskGroup() as agents:
        step("2. Start an agent per node: they register, run burn-in, push telemetry")
        running = []
        gpus: dict[str, SimulatedGpus] = {}
        for identity in FLEET:
            token = (await operator.create_agent_token(identity.node_id)).token
            gpus[identity.node_id] = SimulatedGpus(identity.node_id, model=identity.gpu_model, seed=1)
            node_agent = _agent(plane.address, identity, token, gpus[identity.node_id])
            running.append(agents.create_task(node_agent.run()))
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("agents registering and running burn-in", total=len(FLEET))
            while (judged := await _judged(operator)) < len(FLEET):
                progress.update(task, completed=judged)
                await asyncio.sleep(0.1)
        console.print(render.nodes_table((await operator.list_nodes()).items, "Fleet"))
        failed = [e for e in (await operator.list_node_events(SLOW_NODE)).items if e.event == "FAIL_BURN_IN"]
        console.print(render.node_events_table(failed, f"Why {SLOW_NODE} is QUARANTINED"))
        try:
            await _tenant_walkthrough(plane, operator_token, gpus)
        finally:
            # The agents run until the walkthrough is over, whatever happened.
            for agent in running:
                agent.cancel()


def _agent(address: str, identity: NodeIdentity, token: str, gpus: SimulatedGpus) -> NodeAgent:
    """A simulated agent for ``identity`` on ``gpus``: burn-in and scrub quick."""
    work = SimulatedWork(identity.node_id, identity.gpu_model, seed=1, burn_in_seconds=0.3, scrub_seconds=0.2)
    if identity.node_id == SLOW_NODE:
        work.slow(0.8)
    return NodeAgent(
        address,
        identity,
        token,
        gpus,
        work,
        fabric=SimulatedFabric(),
        interval_s=DEMO_FLEET.heartbeat_interval_s,
        seed=1,
    )


async def _judged(operator: AsyncClient) -> int:
    """How many of the fleet's nodes are past burn-in (READY or QUARANTINED)."""
    nodes = (await operator.list_nodes()).items
    return sum(node.state in ("READY", "QUARANTINED") for node in nodes)


async def _tenant_walkthrough(plane: ControlPlane, operator_token: str, gpus: dict[str, SimulatedGpus]) -> None:
    console = render.console
    async with AsyncClient(plane.address, operator_token) as operator:
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

        step("5. Ask for more than is free: it waits PENDING, holding nothing, and says why")
        waiting = await tenant.create_allocation(gpu_model="H100", node_count=4)
        console.print(render.allocations_table([waiting], "Queued"))
        console.print(render.explanation(await tenant.explain_allocation(waiting.allocation_id)))
        try:
            await tenant.create_allocation(gpu_model="H100", node_count=4, fail_if_unavailable=True)
            console.print("[red]unexpectedly allocated[/red]")
        except ResourceExhaustedError as err:
            console.print(f"with fail_if_unavailable it is refused instead: {err}")
        two_gpus = await tenant.create_allocation(gpu_model="H100", gpus=2)
        console.print(render.allocations_table([two_gpus], "Two GPUs of one node, asked behind it"))
        console.print(render.explanation(await tenant.explain_allocation(two_gpus.allocation_id)))
        cancelled = await tenant.cancel_allocation(waiting.allocation_id)
        console.print(f"cancelling the queued allocation is done at once: done={cancelled.done}, {cancelled.state}")
        with console.status("waiting for the scheduler to admit the two GPUs..."):
            admitted = await tenant.wait_admitted(two_gpus.allocation_id, timeout=30)
        if admitted.state != "ACTIVE":
            raise RuntimeError(f"the two GPUs were not admitted once the nodes freed: {admitted.state}")
        console.print(render.gpu_holds_table(admitted, "The two GPUs, on a node now shared"))
        shared_id, shared_nodes = admitted.allocation_id, admitted.node_ids

        step("6. List")
        console.print(render.allocations_table((await tenant.list_allocations()).items))

        step("7. Metrics: the operator sees a node's history, its tenant only since it holds it")
        async with AsyncClient(plane.address, operator_token) as operator:
            await _metrics(operator, tenant, allocation.node_ids[0])

    async with AsyncClient(plane.address, operator_token) as operator:
        console.print(render.nodes_table((await operator.list_nodes(gpu_model="H100")).items, "H100 nodes"))

        step("8. A GPU falls off the bus: the node is pulled and the allocation gets a spare")
        faulty = allocation.node_ids[1]
        gpus[faulty].inject_xid(3, 79)
        console.print(f"injected: XID 79 (GPU fallen off the bus) on GPU 3 of {faulty}")
        with console.status("waiting for the health controller..."):
            replaced = await _replaced(operator, allocation.allocation_id)
        console.print(render.allocations_table([replaced], "Allocation after the fault"))
        events = [e for e in (await operator.list_node_events(faulty)).items if e.event in ("DRAIN", "RELEASE")]
        console.print(render.node_events_table(events, f"Why {faulty} left the allocation"))

        step("9. Cancel: accepted at once, done when the nodes are scrubbed and released")
        async with AsyncClient(plane.address, created.token) as tenant:
            operations = [await tenant.cancel_allocation(a) for a in (allocation.allocation_id, shared_id)]
            console.print(render.operations_table(operations, "Cancels accepted"))
            with console.status("waiting for the release..."):
                operations = [await tenant.wait_operation(op.name, timeout=60) for op in operations]
            console.print(render.operations_table(operations, "Cancels done"))
            if not all(op.done for op in operations):
                raise RuntimeError("a cancel operation did not finish within 60 s")
        with console.status("waiting for the agents to confirm the scrub..."):
            await _scrubbed(operator, [*replaced.node_ids, faulty, *shared_nodes])
        console.print(render.nodes_table((await operator.list_nodes(gpu_model="H100")).items, "H100 nodes"))
        events = (await operator.list_node_events(replaced.node_ids[-1])).items
        console.print(render.node_events_table(events, f"Why the spare {replaced.node_ids[-1]} is READY"))

        step("10. Invoice: billed from durable usage events, GPU by GPU, from hand-over to release")
        async with AsyncClient(plane.address, created.token) as tenant:
            invoice = await tenant.get_invoice(datetime.now(UTC).strftime("%Y-%m"))
        console.print(invoice_table(invoice))
        console.print(reconciliation_line(invoice))
    step("Done")


async def _polled(
    read: Callable[[], Awaitable[T]], done: Callable[[T], bool], failure: str, timeout_s: float = 60.0
) -> T:
    """``read()`` every 0.1 s until ``done`` says its answer is the awaited one, and return that
    answer; RuntimeError(``failure``) after ``timeout_s``."""
    for _ in range(round(timeout_s / 0.1)):
        answer = await read()
        if done(answer):
            return answer
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{failure} within {timeout_s:g} s")


async def _replaced(operator: AsyncClient, allocation_id: str) -> Allocation:
    """The allocation once a node of it has been replaced."""
    return await _polled(
        lambda: operator.get_allocation(allocation_id),
        lambda allocation: bool(allocation.replacements),
        f"the health controller did not replace a node of {allocation_id}",
    )


async def _scrubbed(operator: AsyncClient, node_ids: Sequence[str]) -> None:
    """Return once none of ``node_ids`` is SCRUBBING."""

    async def states() -> list[str]:
        return [(await operator.get_node(node_id)).state for node_id in node_ids]

    await _polled(
        states, lambda now: "SCRUBBING" not in now, f"the agents did not confirm the scrub of {', '.join(node_ids)}"
    )


async def _metrics(operator: AsyncClient, tenant: AsyncClient, node_id: str) -> None:
    """A few seconds more of the agents' telemetry, then one node's GPU 0 as each side sees it."""
    console = render.console
    allocated_ms = time.time_ns() // 1_000_000
    with console.status("letting the agents push a few more samples..."):
        await asyncio.sleep(3 * DEMO_FLEET.heartbeat_interval_s)
    console.print(f"each agent pushes its 8 GPUs' readings every {DEMO_FLEET.heartbeat_interval_s:g} s")
    start, end = allocated_ms - 60_000, time.time_ns() // 1_000_000 + 1
    fields = ["power_w", "temp_c", "util_pct"]
    everything = await operator.query_metrics(start=start, end=end, node_ids=[node_id], gpu_indexes=[0], fields=fields)
    console.print(result_table(everything, f"{node_id} GPU 0 as the operator sees it"))
    held = await tenant.query_metrics(start=start, end=end, node_ids=[node_id], gpu_indexes=[0], fields=fields)
    console.print(result_table(held, f"{node_id} GPU 0 as its tenant sees it: only since its allocation"))

"""What agents do: register their node, and report its status and their actions' results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from services.auth.principal import Principal
from services.clock import now_us
from services.fabric.partitions import IN_PARTITION
from services.fleet import repository as repo
from services.fleet.repository import NodeRecord, ResultRecord, StatusReport
from services.nodes import commands as node_commands
from services.nodes.inventory import Inventory
from services.nodes.repository import GpuDetails, NodeView
from services.store.engine import Database


async def register_agent(
    store: Database,
    principal: Principal,
    inventory: Inventory,
    details: Sequence[tuple[int, GpuDetails]],
    status: StatusReport | None,
) -> tuple[NodeView, NodeRecord, int]:
    """Register (or confirm) the agent's node and mark it managed by its agent, with its GPUs'
    descriptions and its status, in one transaction: the node, its record, and the heartbeat
    time written."""
    now = now_us()
    adopt = partial(repo.adopt, inventory.node_id, details, status, now_us=now)
    view = await node_commands.register(store, principal, inventory, then=adopt)
    record = repo.record_of(view.row, last_heartbeat_us=now)
    if record.state in IN_PARTITION:
        # An agent restarting on a held node: its record carries the tenant's partition, which
        # the row alone does not (a first registration never is held, and is spared the read).
        found = await store.query(repo.record(inventory.node_id))
        record = record if found is None else replace(found, last_heartbeat_us=now)
    return view, record, now


async def report(store: Database, node_id: str, status: StatusReport | None, results: Sequence[ResultRecord]) -> int:
    """Store what the node's agent reports, and the health strikes its status carries (how many
    is returned); the servicer has checked that the caller speaks for ``node_id``."""
    return await store.transact(partial(repo.save_report, node_id, status, results, now_us=now_us()))

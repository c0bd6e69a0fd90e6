"""The isolation audit as a use case: one snapshot of the fleet, judged by audit.py."""

from __future__ import annotations

import asyncio

from services.fabric import repository as repo
from services.fabric.audit import Violation, audit
from services.fabric.repository import ReportedNode
from services.store.engine import Database
from services.store.tx import Tx


async def audit_isolation(store: Database) -> tuple[int, list[Violation]]:
    """How many nodes were checked (those whose agent reported), and every violation."""
    nodes, owners = await store.query(_snapshot())
    # Every node's status decoded and judged: thousands of JSON documents, off the event loop.
    return len(nodes), await asyncio.to_thread(lambda: audit(repo.partitions_of(nodes), owners))


def _snapshot() -> Tx[tuple[list[ReportedNode], dict[int, str]]]:
    nodes = yield from repo.reported_nodes()
    owners = yield from repo.owners()
    return nodes, owners

"""The isolation audit as a use case: one snapshot of the fleet, judged by audit.py."""

from __future__ import annotations

from services.fabric import repository as repo
from services.fabric.audit import NodePartitions, Violation, audit
from services.store.engine import Database
from services.store.tx import Tx


async def audit_isolation(store: Database) -> tuple[int, list[Violation]]:
    """How many nodes were checked (those whose agent reported), and every violation."""
    nodes, owners = await store.query(_snapshot())
    return len(nodes), audit(nodes, owners)


def _snapshot() -> Tx[tuple[list[NodePartitions], dict[int, str]]]:
    nodes = yield from repo.reported_partitions()
    owners = yield from repo.owners()
    return nodes, owners

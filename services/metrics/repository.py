"""What the metrics service reads from the control plane's database: which nodes exist, and
which a tenant held when (from the usage events billing reads). It writes nothing there;
samples live in the tsdb (services/metrics/samples.py).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import func
from sqlalchemy import select as sa_select
from sqlmodel.ext.asyncio.session import AsyncSession

from services.metrics.holds import HoldRecord
from services.store import core
from services.store.models import NodeRow, UsageEventRow, table_of
from services.usage.repository import UsageKind


async def existing_nodes(session: AsyncSession, node_ids: Collection[str]) -> set[str]:
    """The ids among ``node_ids`` that name registered nodes."""
    if not node_ids:
        return set()
    nodes = table_of(NodeRow)
    query = sa_select(nodes.c.node_id).where(nodes.c.node_id.in_(sorted(node_ids)))
    return {str(row[0]) for row in (await core.execute(session, query)).all()}


async def hold_records(session: AsyncSession, tenant_id: str, node_ids: Collection[str] = ()) -> list[HoldRecord]:
    """Per (allocation, node) of the tenant: its first start and last stop (one per GPU each).

    ``node_ids`` narrows to those nodes; empty means every node the tenant ever held. Served
    by the (tenant_id, at_us) index.
    """
    events = table_of(UsageEventRow)
    query = (
        sa_select(
            events.c.allocation_id,
            events.c.node_id,
            events.c.kind,
            func.min(events.c.at_us),
            func.max(events.c.at_us),
        )
        .where(events.c.tenant_id == tenant_id)
        .group_by(events.c.allocation_id, events.c.node_id, events.c.kind)
    )
    if node_ids:
        query = query.where(events.c.node_id.in_(sorted(node_ids)))
    rows: Sequence[Any] = (await core.execute(session, query)).all()
    starts: dict[tuple[str, str], int] = {}
    stops: dict[tuple[str, str], int] = {}
    for allocation_id, node_id, kind, first_us, last_us in rows:
        key = (str(allocation_id), str(node_id))
        if kind == UsageKind.START:
            starts[key] = int(first_us)
        elif kind == UsageKind.STOP:
            stops[key] = int(last_us)
    return [
        HoldRecord(allocation_id=a, node_id=n, start_us=starts.get((a, n)), stop_us=stops.get((a, n)))
        for a, n in sorted(starts.keys() | stops.keys())
    ]

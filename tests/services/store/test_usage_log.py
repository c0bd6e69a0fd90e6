"""The usage-event log is append-only in the database itself, on both databases: billing's
event counts (services/billing/compute.py) mean "the same events" only because it is."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from services.store.engine import Database
from services.store.models import UsageEventRow, table_of

EVENTS = table_of(UsageEventRow)
ROW = {
    "event_id": "alloc-1/GPU-1/start",
    "tenant_id": "acme",
    "allocation_id": "alloc-1",
    "node_id": "node-1",
    "gpu_uuid": "GPU-1",
    "gpu_model": "H100",
    "kind": "start",
    "at_us": 1_000,
    "source": "control-plane",
    "recorded_us": 1_000,
}


@pytest.mark.parametrize(
    "statement",
    ["UPDATE usage_events SET at_us = at_us + 1", "DELETE FROM usage_events", "UPDATE usage_events SET kind = 'stop'"],
)
async def test_a_usage_event_cannot_be_rewritten_or_deleted(store: Database, statement: str) -> None:
    async with store.write() as session:
        await (await session.connection()).execute(EVENTS.insert(), [ROW])
    with pytest.raises(DBAPIError, match="append-only"):
        async with store.write() as session:
            await (await session.connection()).execute(text(statement))
    async with store.read() as session:
        rows = (await (await session.connection()).execute(select(EVENTS.c.at_us, EVENTS.c.kind))).all()
    assert [tuple(row) for row in rows] == [(1_000, "start")]


async def test_appending_still_works_beside_the_refusals(store: Database) -> None:
    async with store.write() as session:
        await (await session.connection()).execute(EVENTS.insert(), [ROW, {**ROW, "event_id": "alloc-1/GPU-1/stop"}])
    async with store.read() as session:
        count = await (await session.connection()).execute(select(func.count()).select_from(EVENTS))
    assert count.scalar_one() == 2

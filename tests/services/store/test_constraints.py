"""Invariants the database itself enforces, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, func, select

from services.store.engine import Database
from services.store.migrations import alembic_config
from services.store.models import (
    AllocationRow,
    AssignmentRow,
    GpuRow,
    IdempotencyKeyRow,
    NodeRow,
    TenantRow,
)

NOW = 1_800_000_000_000_000
CONCURRENT = 20


async def _seed(store: Database, *, allocations: int) -> list[str]:
    """One tenant, one node and ``allocations`` allocations; return the allocation ids."""
    ids = [f"alloc-{i:03d}" for i in range(allocations)]
    async with store.write() as session:
        session.add(TenantRow(tenant_id="acme", display_name="Acme", created_us=NOW))
        session.add(
            NodeRow(
                node_id="node-000",
                gpu_model="H100",
                zone="zone-a",
                rack="rack-0",
                leaf_switch="leaf-0",
                state="ALLOCATED",
                created_us=NOW,
                state_changed_us=NOW,
            )
        )
        await session.flush()
        session.add_all(
            AllocationRow(
                allocation_id=a, tenant_id="acme", gpu_model="H100", node_count=1, state="ACTIVE", created_us=NOW + i
            )
            for i, a in enumerate(ids)
        )
    return ids


def _assignment(allocation_id: str, *, released_us: int | None = None) -> AssignmentRow:
    return AssignmentRow(
        allocation_id=allocation_id,
        node_id="node-000",
        tenant_id="acme",
        position=0,
        assigned_us=NOW,
        released_us=released_us,
    )


async def _insert_assignment(store: Database, allocation_id: str) -> None:
    async with store.write() as session:
        session.add(_assignment(allocation_id))


async def _live_assignments(store: Database) -> list[AssignmentRow]:
    async with store.read() as session:
        query = select(AssignmentRow).where(col(AssignmentRow.released_us).is_(None))
        return list((await session.exec(query)).all())


async def test_second_live_assignment_of_a_node_fails(store: Database) -> None:
    """The partial unique index refuses a second live assignment of the same node."""
    first, second = await _seed(store, allocations=2)
    await _insert_assignment(store, first)
    with pytest.raises(IntegrityError):
        await _insert_assignment(store, second)
    live = await _live_assignments(store)
    assert [a.allocation_id for a in live] == [first]


async def test_concurrent_live_assignments_exactly_one_wins(store: Database) -> None:
    """Twenty concurrent transactions assigning one node: exactly one commits, the rest hit IntegrityError."""
    ids = await _seed(store, allocations=CONCURRENT)
    results = await asyncio.gather(*(_insert_assignment(store, a) for a in ids), return_exceptions=True)
    winners = [a for a, r in zip(ids, results, strict=True) if r is None]
    errors = [r for r in results if r is not None]
    assert len(winners) == 1
    assert len(errors) == CONCURRENT - 1
    assert all(isinstance(e, IntegrityError) for e in errors), errors
    live = await _live_assignments(store)
    assert [a.allocation_id for a in live] == winners


async def test_released_assignment_frees_the_node(store: Database) -> None:
    """Once the live assignment is released, a new live one succeeds, and released ones may pile up."""
    first, second, third = await _seed(store, allocations=3)
    await _insert_assignment(store, first)
    async with store.write() as session:
        row = (await session.exec(select(AssignmentRow).where(AssignmentRow.allocation_id == first))).one()
        row.released_us = NOW + 10
        session.add(row)
    await _insert_assignment(store, second)
    async with store.write() as session:
        session.add(_assignment(third, released_us=NOW + 20))
    live = await _live_assignments(store)
    assert [a.allocation_id for a in live] == [second]
    async with store.read() as session:
        total = (await session.exec(select(func.count()).select_from(AssignmentRow))).one()
    assert total == 3


async def test_idempotency_key_is_unique_per_tenant_method_and_request(store: Database) -> None:
    """A duplicate (tenant, method, request_id) is an IntegrityError; another tenant may reuse the id."""
    async with store.write() as session:
        session.add_all(
            [
                TenantRow(tenant_id="acme", display_name="Acme", created_us=NOW),
                TenantRow(tenant_id="globex", display_name="Globex", created_us=NOW),
            ]
        )

    def key(tenant_id: str, method: str = "CreateAllocation", result_id: str = "alloc-1") -> IdempotencyKeyRow:
        return IdempotencyKeyRow(
            tenant_id=tenant_id,
            method=method,
            request_id="req-1",
            fingerprint="f" * 64,
            result_id=result_id,
            created_us=NOW,
        )

    async with store.write() as session:
        session.add(key("acme"))
    with pytest.raises(IntegrityError):
        async with store.write() as session:
            session.add(key("acme", result_id="alloc-2"))
    async with store.write() as session:
        session.add(key("globex"))
        session.add(key("acme", method="CancelAllocation"))
    async with store.read() as session:
        rows = (await session.exec(select(IdempotencyKeyRow))).all()
    assert sorted((r.tenant_id, r.method, r.result_id) for r in rows) == [
        ("acme", "CancelAllocation", "alloc-1"),
        ("acme", "CreateAllocation", "alloc-1"),
        ("globex", "CreateAllocation", "alloc-1"),
    ]


async def test_gpu_uuid_belongs_to_one_node(store: Database) -> None:
    """A GPU UUID already owned by one node cannot be inserted for another (primary key)."""
    await _seed(store, allocations=0)
    async with store.write() as session:
        session.add(GpuRow(gpu_uuid="GPU-shared", node_id="node-000", gpu_index=0))

    async def register_with_the_shared_gpu() -> None:
        async with store.write() as session:
            session.add(
                NodeRow(
                    node_id="node-001",
                    gpu_model="H100",
                    zone="z",
                    rack="r",
                    leaf_switch="l",
                    state="REGISTERED",
                    created_us=NOW,
                    state_changed_us=NOW,
                )
            )
            await session.flush()
            session.add(GpuRow(gpu_uuid="GPU-shared", node_id="node-001", gpu_index=0))

    with pytest.raises(IntegrityError):
        await register_with_the_shared_gpu()
    async with store.read() as session:
        assert (await session.get(NodeRow, "node-001")) is None


@pytest.mark.parametrize("url", ["sqlite+aiosqlite://", "sqlite+aiosqlite:///:memory:", "sqlite:///:memory:"])
async def test_in_memory_sqlite_is_refused(url: str) -> None:
    """Database.open refuses an in-memory SQLite database with ValueError."""
    with pytest.raises(ValueError, match="in-memory"):
        await Database.open(url)


async def test_opening_twice_is_idempotent(database_url: str) -> None:
    """Re-opening a migrated database re-runs migrations harmlessly and keeps the data."""
    first = await Database.open(database_url)
    try:
        async with first.write() as session:
            session.add(TenantRow(tenant_id="acme", display_name="Acme", created_us=NOW))
    finally:
        await first.close()
    second = await Database.open(database_url)
    try:
        async with second.read() as session:
            tenant = await session.get(TenantRow, "acme")
            connection = await session.connection()
            versions = (await connection.execute(text("SELECT version_num FROM alembic_version"))).all()
        assert tenant is not None
        assert tenant.display_name == "Acme"
        head = ScriptDirectory.from_config(alembic_config()).get_current_head()
        assert [v[0] for v in versions] == [head]
    finally:
        await second.close()

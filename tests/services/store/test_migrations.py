"""The Alembic migrations produce exactly the schema the SQLModel models describe."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlmodel import SQLModel

import services.store.models  # noqa: F401  (registers every table on SQLModel.metadata)
from services.nodes.repository import gpu_owners
from services.store.engine import Database, null_pool_engine
from services.store.migrations import alembic_config


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True, "compare_server_default": True})
    return list(compare_metadata(context, SQLModel.metadata))


def _current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


@asynccontextmanager
async def _migrated(fresh_database_url: str) -> AsyncIterator[AsyncConnection]:
    """A connection to the database after Database.open has migrated it to head."""
    store = await Database.open(fresh_database_url)
    await store.close()
    engine = null_pool_engine(fresh_database_url)
    try:
        async with engine.connect() as connection:
            yield connection
    finally:
        await engine.dispose()


# SQLAlchemy cannot reflect SQLite's index on lower(gpu_uuid), so autogenerate skips comparing
# it (and says so); the next test checks that it exists.
@pytest.mark.filterwarnings("ignore:autogenerate skipping metadata-specified expression-based index")
@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")
async def test_head_matches_models(fresh_database_url: str) -> None:
    """After Database.open the live schema equals SQLModel.metadata: autogenerate finds no difference."""
    async with _migrated(fresh_database_url) as connection:
        differences = await connection.run_sync(_differences)
        revision = await connection.run_sync(_current_revision)
    assert differences == []
    assert revision == ScriptDirectory.from_config(alembic_config()).get_current_head()


@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")
async def test_migrations_create_every_model_table_and_index(fresh_database_url: str) -> None:
    """Every table and named index of the models exists after migrating, the live-assignment index unique."""

    def read(connection: Connection) -> tuple[set[str], dict[str, bool], set[str]]:
        inspector = inspect(connection)
        indexes = {
            index["name"]: bool(index["unique"])
            for table in inspector.get_table_names()
            for index in inspector.get_indexes(table)
            if index["name"]
        }
        # SQLAlchemy cannot reflect SQLite's indexes on expressions; the catalog names them all.
        catalog = (
            "SELECT name FROM sqlite_master WHERE type = 'index'"
            if connection.dialect.name == "sqlite"
            else "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
        )
        names = {str(name) for (name,) in connection.execute(text(catalog))}
        return set(inspector.get_table_names()), indexes, names

    async with _migrated(fresh_database_url) as connection:
        tables, indexes, index_names = await connection.run_sync(read)
    assert set(SQLModel.metadata.tables) <= tables
    expected = {index.name for table in SQLModel.metadata.tables.values() for index in table.indexes}
    assert expected <= index_names
    assert "ix_gpus_uuid_lower" in index_names
    assert indexes["uq_assignment_live_node"] is True


async def test_registration_looks_gpus_up_through_the_index(fresh_database_url: str) -> None:
    """The case-insensitive GPU lookup of RegisterNode is an index search, not a scan of every GPU."""
    # The lookup's one statement, as the step yields it.
    statement = next(gpu_owners(["GPU-a", "GPU-b"]))
    params = dict(statement.params)
    async with _migrated(fresh_database_url) as connection:
        if connection.dialect.name == "sqlite":
            explained = await connection.execute(text(f"EXPLAIN QUERY PLAN {statement.text}"), params)
            plan = [str(row[-1]) for row in explained]
        else:
            # An empty table is cheaper to scan; forbid that to see whether the index serves.
            await connection.execute(text("SET LOCAL enable_seqscan = off"))
            plan = [str(row[0]) for row in await connection.execute(text(f"EXPLAIN {statement.text}"), params)]
    assert any("ix_gpus_uuid_lower" in line for line in plan), plan


def test_single_head() -> None:
    """The revision graph has one head, so `upgrade head` is unambiguous."""
    assert len(ScriptDirectory.from_config(alembic_config()).get_heads()) == 1

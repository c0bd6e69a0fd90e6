"""The Alembic migrations produce exactly the schema the SQLModel models describe."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

import services.store.models  # noqa: F401  (registers every table on SQLModel.metadata)
from services.store.engine import Store, null_pool_engine
from services.store.migrations import alembic_config


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True, "compare_server_default": True})
    return list(compare_metadata(context, SQLModel.metadata))


def _current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def test_head_matches_models(database_url: str) -> None:
    """After Store.open the live schema equals SQLModel.metadata: autogenerate finds no difference."""
    store = await Store.open(database_url)
    await store.close()
    engine = null_pool_engine(database_url)
    try:
        async with engine.connect() as connection:
            differences = await connection.run_sync(_differences)
            revision = await connection.run_sync(_current_revision)
    finally:
        await engine.dispose()
    assert differences == []
    assert revision == ScriptDirectory.from_config(alembic_config()).get_current_head()


async def test_migrations_create_every_model_table_and_index(database_url: str) -> None:
    """Every table and named index of the models exists after migrating, the live-assignment index unique."""
    store = await Store.open(database_url)
    await store.close()
    engine = null_pool_engine(database_url)

    def read(connection: Connection) -> tuple[set[str], dict[str, bool]]:
        inspector = inspect(connection)
        indexes = {
            index["name"]: bool(index["unique"])
            for table in inspector.get_table_names()
            for index in inspector.get_indexes(table)
            if index["name"]
        }
        return set(inspector.get_table_names()), indexes

    try:
        async with engine.connect() as connection:
            tables, indexes = await connection.run_sync(read)
    finally:
        await engine.dispose()
    assert set(SQLModel.metadata.tables) <= tables
    expected = {index.name for table in SQLModel.metadata.tables.values() for index in table.indexes}
    assert expected <= set(indexes)
    assert indexes["uq_assignment_live_node"] is True


def test_single_head() -> None:
    """The revision graph has one head, so `upgrade head` is unambiguous."""
    assert len(ScriptDirectory.from_config(alembic_config()).get_heads()) == 1

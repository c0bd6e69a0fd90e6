"""Alembic environment: runs migrations on the connection the caller passes in.

From the command line (``alembic -c services/store/migrations/alembic.ini ...``) the URL comes
from GPUCLOUD_DATABASE_URL.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlmodel import SQLModel

import services.store.models  # noqa: F401  (registers the tables on SQLModel.metadata)

TARGET_METADATA = SQLModel.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=TARGET_METADATA,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_from_url(url: str) -> None:
    engine = create_async_engine(url)
    async with engine.begin() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


given = context.config.attributes.get("connection")
if given is not None:
    _run(given)
else:
    asyncio.run(_run_from_url(os.environ["GPUCLOUD_DATABASE_URL"]))

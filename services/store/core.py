"""Core (non-ORM) statements inside an ORM session's transaction.

Hot paths use bulk INSERT/UPDATE statements instead of the ORM unit of work; they run on the
session's own connection so they share its transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import CursorResult, Executable
from sqlmodel.ext.asyncio.session import AsyncSession


async def execute(
    session: AsyncSession, statement: Executable, rows: Sequence[Mapping[str, Any]] | None = None
) -> CursorResult[Any]:
    """Run ``statement`` (with ``rows`` for an executemany) in the session's transaction."""
    connection = await session.connection()
    result = await connection.execute(statement, list(rows) if rows is not None else None)
    return result

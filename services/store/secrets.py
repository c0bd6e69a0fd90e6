"""Server-wide secrets kept in the database, so every replica signs with the same key."""

from __future__ import annotations

import secrets

from sqlalchemy.exc import IntegrityError

from services.store.engine import Database
from services.store.models import SecretRow

PAGE_TOKEN_KEY = "page_token_hmac"


async def get_or_create(store: Database, name: str, *, length: int = 32) -> bytes:
    """The secret called ``name``, created at random on first use (first writer wins)."""
    async with store.read() as session:
        row = await session.get(SecretRow, name)
        if row is not None:
            return row.value
    try:
        async with store.write() as session:
            row = await session.get(SecretRow, name)
            if row is None:
                row = SecretRow(name=name, value=secrets.token_bytes(length))
                session.add(row)
            return row.value
    except IntegrityError:
        async with store.read() as session:
            existing = await session.get(SecretRow, name)
            assert existing is not None
            return existing.value

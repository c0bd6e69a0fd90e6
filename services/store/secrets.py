"""Server-wide secrets kept in the database, so every replica signs with the same key."""

from __future__ import annotations

import secrets
from functools import partial

from services.store.engine import Database
from services.store.tx import Refused, Sql, Tx

PAGE_TOKEN_KEY = "page_token_hmac"


def _read(name: str) -> Tx[bytes | None]:
    """The secret's value, or None when there is none yet."""
    found = (yield Sql("SELECT value FROM server_secrets WHERE name = :name", {"name": name})).first()
    return None if found is None else bytes(found[0])


def _create(name: str, value: bytes) -> Tx[bytes]:
    """Store ``value`` under ``name`` unless the secret exists; the secret's value either way.
    Two replicas creating it at once: the second insert is ``Refused``."""
    existing = yield from _read(name)
    if existing is not None:
        return existing
    yield Sql("INSERT INTO server_secrets (name, value) VALUES (:name, :value)", {"name": name, "value": value})
    return value


async def get_or_create(store: Database, name: str, *, length: int = 32) -> bytes:
    """The secret called ``name``, created at random on first use (first writer wins)."""
    existing = await store.query(_read(name))
    if existing is not None:
        return existing
    try:
        return await store.transact(partial(_create, name, secrets.token_bytes(length)))
    except Refused:
        # Another replica created it meanwhile: its value is the one that stands.
        winner = await store.query(_read(name))
        assert winner is not None
        return winner

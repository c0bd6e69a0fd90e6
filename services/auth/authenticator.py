"""Turns the ``authorization: Bearer <token>`` metadata of a call into a Principal.

Resolved tokens are cached for a few seconds so the hot path costs no database round trip;
revoking a token therefore takes effect within ``CACHE_SECONDS``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from services.auth import repository
from services.auth.principal import Principal
from services.errors import Unauthenticated
from services.store.engine import Store

CACHE_SECONDS = 5.0
_CACHE_LIMIT = 10_000


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The token of an ``authorization`` header, or None."""
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode() if isinstance(value, bytes) else value
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


class Authenticator:
    """Resolves bearer tokens against the store, with a short positive cache."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._cache: dict[str, tuple[float, Principal]] = {}

    async def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> Principal:
        token = bearer_token(metadata)
        if token is None:
            raise Unauthenticated(
                reason="MISSING_TOKEN", message="send 'authorization: Bearer <token>' metadata with every call"
            )
        now = time.monotonic()
        cached = self._cache.get(token)
        if cached is not None and cached[0] > now:
            return cached[1]
        async with self._store.read() as session:
            principal = await repository.resolve(session, token)
        if principal is None:
            raise Unauthenticated(reason="INVALID_TOKEN", message="the bearer token is unknown or revoked")
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[token] = (now + CACHE_SECONDS, principal)
        return principal

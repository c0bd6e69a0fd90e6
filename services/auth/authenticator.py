"""Turns the ``authorization: Bearer <token>`` metadata of a call into a Principal.

Resolved tokens are cached for a few seconds so the hot path costs no database round trip;
revoking a token therefore takes effect within ``CACHE_SECONDS`` on other replicas, and at
once on the one that revoked it (``forget``). When a busy token's entry expires, the calls
that find it missing share one lookup instead of each reading the database (64 calls in
flight made 64 reads every few seconds).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from services.auth import repository
from services.auth.principal import Principal
from services.errors import Unauthenticated
from services.store.engine import Database

CACHE_SECONDS = 5.0
_CACHE_LIMIT = 10_000


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The token of the call's ``authorization: Bearer <token>`` metadata; None when the call
    has no ``authorization`` metadata. UNAUTHENTICATED (MALFORMED_AUTHORIZATION) when it has one
    of another scheme or with no token, so that a client sending Basic credentials is not told
    that it sent nothing."""
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            scheme, _, token = text.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            # Name the scheme when it looks like one; never echo what may be a credential.
            if scheme.isalpha() and len(scheme) <= 16 and token.strip():
                problem = f"uses the {scheme!r} scheme"
            else:
                problem = "is not of the form 'Bearer <token>'"
            raise Unauthenticated(
                reason="MALFORMED_AUTHORIZATION",
                message=f"the authorization metadata {problem}; send 'authorization: Bearer <token>'",
            )
    return None


class Authenticator:
    """Resolves bearer tokens against the store, with a short positive cache."""

    def __init__(self, store: Database) -> None:
        self._store = store
        self._cache: dict[str, tuple[float, Principal]] = {}
        # Lookups in progress, by token: later callers wait for the first one's answer.
        self._lookups: dict[str, asyncio.Future[Principal | None]] = {}
        # Counts ``forget`` calls: a lookup that read its row before a revoke committed must not
        # cache what it read after the revoke evicted the token.
        self._forgets = 0

    def forget(self, token_id: str) -> None:
        """Drop the cached principal of ``token_id`` (just revoked), so its next call is looked up."""
        self._forgets += 1
        for token, (_, principal) in list(self._cache.items()):
            if principal.token_id == token_id:
                del self._cache[token]
        # A lookup in progress may have read the row before the revoke committed: calls that
        # arrive from now on must not share its answer, so they start their own. (Which token
        # it is for is unknown until it answers; the few lookups in flight are all let go.)
        self._lookups.clear()

    async def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> Principal:
        """The principal of a call's bearer token; UNAUTHENTICATED when it is missing, unknown or revoked."""
        token = bearer_token(metadata)
        if token is None:
            raise Unauthenticated(
                reason="MISSING_TOKEN", message="send 'authorization: Bearer <token>' metadata with every call"
            )
        cached = self._cache.get(token)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        principal = await self._lookup(token)
        if principal is None:
            raise Unauthenticated(reason="INVALID_TOKEN", message="the bearer token is unknown or revoked")
        return principal

    async def _lookup(self, token: str) -> Principal | None:
        """The token's principal from the store, sharing a lookup already in progress."""
        while (in_progress := self._lookups.get(token)) is not None:
            try:
                # Shielded: a waiter that is cancelled must not cancel the others' answer.
                return await asyncio.shield(in_progress)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not in_progress.cancelled() or (task is not None and task.cancelling()):
                    raise  # this caller itself is being cancelled
                # The caller that was looking went away: look again, or look ourselves.
        answer: asyncio.Future[Principal | None] = asyncio.get_running_loop().create_future()
        self._lookups[token] = answer
        forgets = self._forgets
        try:
            principal = await self._store.query(repository.resolve(token))
        except Exception as error:
            answer.set_exception(error)  # a failing database fails the waiters alike
            answer.exception()  # retrieved, so an unshared failure logs no warning
            raise
        except BaseException:
            answer.cancel()
            raise
        finally:
            if self._lookups.get(token) is answer:  # not let go by ``forget`` meanwhile
                del self._lookups[token]
        if principal is not None and forgets == self._forgets:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[token] = (time.monotonic() + CACHE_SECONDS, principal)
        answer.set_result(principal)
        return principal

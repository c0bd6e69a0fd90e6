"""Turns the ``authorization: Bearer <token>`` metadata of a call into a Principal.

Resolved tokens are cached so the hot path costs no database round trip. Instead of expiring
each entry after a few seconds (which made every agent's heartbeat, 10 s apart, a lookup), one
query every ``CACHE_SECONDS / 2`` reads the tokens revoked lately and drops them
(``watch_revocations``). Cached entries are used only while the last of those reads began
less than ``CACHE_SECONDS`` ago, so a revoke takes effect within ``CACHE_SECONDS`` on other
replicas whether or not the reads succeed, and at once on the one that revoked it
(``forget``). Calls that find a token missing share one lookup instead of each reading the
database.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable

import structlog

from services.auth import repository
from services.auth.principal import Principal
from services.clock import now_us
from services.errors import Unauthenticated
from services.store.engine import Database

log = structlog.get_logger(__name__)

CACHE_SECONDS = 5.0
# Tokens cached at most (about 300 bytes each): a 10,000-node fleet's agents and its tenants.
_CACHE_LIMIT = 100_000
# How far back each read of revocations looks: past a revoke's commit delay and the replicas'
# clock skew. Forgetting a token again is harmless, so the reads overlap widely.
REVOCATION_LOOKBACK_US = 60_000_000


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
        self._cache: dict[str, Principal] = {}
        # Cached principals are used until then (time.monotonic): CACHE_SECONDS after the
        # last read of revocations that succeeded began.
        self._fresh_until = -math.inf
        # Lookups in progress, by token: later callers wait for the first one's answer.
        self._lookups: dict[str, asyncio.Future[Principal | None]] = {}
        # Counts ``forget`` calls: a lookup that read its row before a revoke committed must not
        # cache what it read after the revoke evicted the token.
        self._forgets = 0

    def forget(self, token_id: str) -> None:
        """Drop the cached principal of ``token_id`` (just revoked), so its next call is looked up."""
        self._forgets += 1
        self._forget_ids({token_id})

    def _forget_ids(self, token_ids: set[str]) -> None:
        for token, principal in list(self._cache.items()):
            if principal.token_id in token_ids:
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
        if cached is not None and time.monotonic() < self._fresh_until:
            return cached
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
            self._cache[token] = principal
        answer.set_result(principal)
        return principal

    async def watch_revocations(self) -> None:
        """Drop the tokens revoked lately from the cache, every ``CACHE_SECONDS / 2``, until
        cancelled; a failed read is logged, and the cache goes unused once the last read that
        succeeded is ``CACHE_SECONDS`` old."""
        while True:
            try:
                await self.read_revocations()
            except Exception as error:
                log.warning("revocations_read_failed", error=repr(error))
            await asyncio.sleep(CACHE_SECONDS / 2)

    async def read_revocations(self) -> None:
        """One read of the tokens revoked lately: drop them from the cache, and let it be used
        for ``CACHE_SECONDS`` from when the read began."""
        began = time.monotonic()
        revoked = await self._store.query(repository.revoked_since(now_us() - REVOCATION_LOOKBACK_US))
        if revoked:
            self._forget_ids(set(revoked))
        self._fresh_until = began + CACHE_SECONDS

"""A revoke evicts the token from the authenticator's cache, also from a lookup in progress."""

from __future__ import annotations

import asyncio
from typing import TypeVar

import pytest

from services.auth import tokens
from services.auth.authenticator import Authenticator
from services.auth.principal import Role
from services.clock import now_us
from services.errors import Unauthenticated
from services.store.engine import Database
from services.store.models import TokenRow
from services.store.tx import Tx
from tests.services.test_authenticator import bearer, operator_token

T = TypeVar("T")


def token_id_of(plaintext: str) -> str:
    parts = tokens.split(plaintext)
    assert parts is not None
    return parts[0]


async def revoke_row(store: Database, token_id: str) -> None:
    """Revoke behind the authenticator's back, as another replica would."""
    async with store.write() as session:
        row = await session.get(TokenRow, token_id)
        assert row is not None
        row.revoked_us = now_us()
        session.add(row)


class ReadThenHold:
    """The store's real ``query`` (the authenticator reads only to look a token up), the first
    read held after it has read the row until released."""

    def __init__(self, store: Database) -> None:
        self.calls = 0
        self.read = asyncio.Event()
        self.release = asyncio.Event()
        self._real = store.query

    async def __call__(self, step: Tx[T]) -> T:
        self.calls += 1
        found = await self._real(step)
        if self.calls == 1:
            self.read.set()
            await self.release.wait()
        return found


@pytest.mark.parametrize("dropped_by", ["forget", "read_revocations"])
async def test_a_token_revoked_around_the_cache_is_refused_once_dropped(store: Database, dropped_by: str) -> None:
    """Revoked behind this authenticator's back (by another replica), a cached token passes
    until the cache drops it: by ``forget`` (this replica revoked it) or by the periodic read of
    revoked tokens. The other tokens stay cached."""
    token = await operator_token(store)
    other = await operator_token(store)
    authenticator = Authenticator(store)
    await authenticator.read_revocations()
    await authenticator.authenticate(bearer(token))
    await authenticator.authenticate(bearer(other))
    await revoke_row(store, token_id_of(token))
    await authenticator.authenticate(bearer(token))  # still cached
    if dropped_by == "forget":
        authenticator.forget(token_id_of(token))
    else:
        await authenticator.read_revocations()
    with pytest.raises(Unauthenticated):
        await authenticator.authenticate(bearer(token))
    assert (await authenticator.authenticate(bearer(other))).token_id == token_id_of(other)


async def test_a_lookup_that_read_the_row_before_the_revoke_caches_nothing(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup has read the row before the revoke committed, and the revoke's eviction comes
    before it caches what it read: its call, in flight before the revoke, passes, but the next
    call is looked up again and refused, not served from the cache for 5 s."""
    token = await operator_token(store)
    resolve = ReadThenHold(store)
    monkeypatch.setattr(store, "query", resolve)
    authenticator = Authenticator(store)
    in_flight = asyncio.create_task(authenticator.authenticate(bearer(token)))
    await resolve.read.wait()
    await revoke_row(store, token_id_of(token))
    authenticator.forget(token_id_of(token))
    resolve.release.set()
    assert (await in_flight).role is Role.OPERATOR
    with pytest.raises(Unauthenticated):
        await authenticator.authenticate(bearer(token))
    assert resolve.calls == 2


async def test_a_call_after_the_revoke_does_not_join_a_lookup_begun_before_it(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup in progress read the row before the revoke: a call that arrives after the
    revoke answered must not share that lookup's answer, but look the token up itself."""
    token = await operator_token(store)
    resolve = ReadThenHold(store)
    monkeypatch.setattr(store, "query", resolve)
    authenticator = Authenticator(store)
    in_flight = asyncio.create_task(authenticator.authenticate(bearer(token)))
    await resolve.read.wait()
    await revoke_row(store, token_id_of(token))
    authenticator.forget(token_id_of(token))
    # While the first lookup is still held: joining it would wait here until the timeout.
    with pytest.raises(Unauthenticated):
        await asyncio.wait_for(authenticator.authenticate(bearer(token)), timeout=10)
    resolve.release.set()
    assert (await in_flight).role is Role.OPERATOR  # sent before the revoke answered
    assert resolve.calls == 2
    with pytest.raises(Unauthenticated):
        await authenticator.authenticate(bearer(token))

"""A revoke evicts the token from the authenticator's cache, also from a lookup in progress."""

from __future__ import annotations

import asyncio

import pytest
from sqlmodel.ext.asyncio.session import AsyncSession

from services.auth import repository, tokens
from services.auth.authenticator import Authenticator
from services.auth.principal import Principal, Role
from services.errors import Unauthenticated
from services.store.engine import Database
from services.store.models import TokenRow
from tests.services.test_authenticator import bearer, operator_token


def token_id_of(plaintext: str) -> str:
    parts = tokens.split(plaintext)
    assert parts is not None
    return parts[0]


async def revoke_row(store: Database, token_id: str) -> None:
    """Revoke behind the authenticator's back, as another replica would."""
    async with store.write() as session:
        row = await session.get(TokenRow, token_id)
        assert row is not None
        row.revoked_us = 1
        session.add(row)


class ReadThenHold:
    """The real ``repository.resolve``, held after it has read the row until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.read = asyncio.Event()
        self.release = asyncio.Event()
        self._real = repository.resolve

    async def __call__(self, session: AsyncSession, plaintext: str) -> Principal | None:
        self.calls += 1
        principal = await self._real(session, plaintext)
        if self.calls == 1:
            self.read.set()
            await self.release.wait()
        return principal


async def test_a_forgotten_token_is_looked_up_again_and_refused_once_revoked(store: Database) -> None:
    token = await operator_token(store)
    async with store.write() as session:
        other = await repository.create_token(session, Role.OPERATOR)
    authenticator = Authenticator(store)
    await authenticator.authenticate(bearer(token))
    await authenticator.authenticate(bearer(other))
    await revoke_row(store, token_id_of(token))
    # Still cached: the revoke went around this authenticator.
    await authenticator.authenticate(bearer(token))
    authenticator.forget(token_id_of(token))
    with pytest.raises(Unauthenticated):
        await authenticator.authenticate(bearer(token))
    assert (await authenticator.authenticate(bearer(other))).token_id == token_id_of(other)  # the others stay


async def test_a_lookup_that_read_the_row_before_the_revoke_caches_nothing(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup has read the row before the revoke committed, and the revoke's eviction comes
    before it caches what it read: its call, in flight before the revoke, passes, but the next
    call is looked up again and refused, not served from the cache for 5 s."""
    token = await operator_token(store)
    resolve = ReadThenHold()
    monkeypatch.setattr(repository, "resolve", resolve)
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
    resolve = ReadThenHold()
    monkeypatch.setattr(repository, "resolve", resolve)
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

"""Bearer tokens to principals: the cache, and one shared lookup when it has expired."""

from __future__ import annotations

import asyncio
from typing import TypeVar

import pytest

from services.auth.authenticator import Authenticator
from services.auth.principal import Role
from services.errors import Unauthenticated
from services.store.engine import Database
from services.store.tx import Tx
from services.tokens.commands import create_operator_token

T = TypeVar("T")


async def operator_token(store: Database) -> str:
    return (await create_operator_token(store)).plaintext


class CountedLookups:
    """The store's real ``query``, counting the reads (the authenticator reads only to look a
    token up); the first can be held back before it reads."""

    def __init__(self, store: Database, *, hold_first: bool = False) -> None:
        self.calls = 0
        self.first_started = asyncio.Event()
        self.release_first = asyncio.Event()
        if not hold_first:
            self.release_first.set()
        self._real = store.query

    async def __call__(self, step: Tx[T]) -> T:
        self.calls += 1
        if self.calls == 1:
            self.first_started.set()
            await self.release_first.wait()
        return await self._real(step)


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


async def test_calls_that_miss_the_cache_together_share_one_lookup(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = await operator_token(store)
    authenticator = Authenticator(store)
    await authenticator.read_revocations()
    resolve = CountedLookups(store)
    monkeypatch.setattr(store, "query", resolve)
    principals = await asyncio.gather(*(authenticator.authenticate(bearer(token)) for _ in range(20)))
    assert {p.role for p in principals} == {Role.OPERATOR}
    assert resolve.calls == 1
    await authenticator.authenticate(bearer(token))  # cached now
    assert resolve.calls == 1


async def test_the_cache_is_unused_until_revocations_have_been_read(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a recent read of the revoked tokens nothing bounds how stale an entry is: every
    call is looked up."""
    token = await operator_token(store)
    authenticator = Authenticator(store)
    resolve = CountedLookups(store)
    monkeypatch.setattr(store, "query", resolve)
    for _ in range(3):
        await authenticator.authenticate(bearer(token))
    assert resolve.calls == 3


async def test_an_unknown_token_is_refused_to_every_caller_after_one_lookup(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await operator_token(store)
    resolve = CountedLookups(store)
    monkeypatch.setattr(store, "query", resolve)
    authenticator = Authenticator(store)
    outcomes = await asyncio.gather(
        *(authenticator.authenticate(bearer("gpc_nope.nope")) for _ in range(5)), return_exceptions=True
    )
    assert all(isinstance(o, Unauthenticated) and o.reason == "INVALID_TOKEN" for o in outcomes)
    assert resolve.calls == 1


async def test_waiters_outlive_the_caller_that_was_looking(store: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller doing the lookup is cancelled (its client went away): the others still get
    their answer, from a lookup of their own."""
    token = await operator_token(store)
    resolve = CountedLookups(store, hold_first=True)
    monkeypatch.setattr(store, "query", resolve)
    authenticator = Authenticator(store)
    first = asyncio.ensure_future(authenticator.authenticate(bearer(token)))
    await resolve.first_started.wait()
    waiters = [asyncio.ensure_future(authenticator.authenticate(bearer(token))) for _ in range(3)]
    await asyncio.sleep(0)  # the waiters are now waiting on the first lookup
    first.cancel()
    principals = await asyncio.gather(*waiters)
    assert {p.role for p in principals} == {Role.OPERATOR}
    assert first.cancelled()
    assert resolve.calls == 2

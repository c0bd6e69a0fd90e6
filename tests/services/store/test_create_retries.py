"""What a create that keeps losing races reports: a key held by a duplicate in progress is
IDEMPOTENCY_KEY_IN_USE; losing to deadlocks or moved nodes is PLACEMENT_CONTENDED. Both are
ABORTED, which clients retry; the reason tells an operator which race it was."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from services.allocations import commands
from services.allocations.requests import AllocationRequest
from services.errors import Aborted
from services.nodes.inventory import GpuModel
from services.store.engine import Database
from services.store.tx import Conflict, Deadlock, Tx


def always_losing(error: Exception) -> Callable[..., Any]:
    async def transact(make: Callable[[], Tx[Any]]) -> Any:
        raise error

    return transact


def always_losing_in_order(error: Exception) -> Callable[..., Any]:
    async def transact_in_order(makes: Sequence[Callable[[], Tx[Any]]]) -> list[object]:
        return [error for _ in makes]

    return transact_in_order


@pytest.mark.parametrize(
    ("lost_to", "reason"),
    [
        (Conflict("duplicate key value violates unique constraint"), "IDEMPOTENCY_KEY_IN_USE"),
        (Deadlock("deadlock detected"), "PLACEMENT_CONTENDED"),
    ],
)
async def test_a_create_that_keeps_losing_says_to_what(
    store: Database, monkeypatch: pytest.MonkeyPatch, lost_to: Exception, reason: str
) -> None:
    monkeypatch.setattr(store, "transact", always_losing(lost_to))
    monkeypatch.setattr(store, "transact_in_order", always_losing_in_order(lost_to))
    with pytest.raises(Aborted) as raised:
        await commands.create(store, AllocationRequest("acme", GpuModel.H100, 1, "request-1"))
    assert raised.value.reason == reason

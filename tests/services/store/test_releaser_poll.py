"""The releaser's timer passes read before they write: an idle fleet costs no write
transaction a second, and a cancel that woke nobody here (another replica's) is still released."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from services.allocations import commands
from services.allocations.releaser import Releaser
from services.allocations.requests import AllocationRequest
from services.auth.principal import CONTROL_PLANE, Principal, Role
from services.nodes import commands as node_commands
from services.nodes.inventory import GpuModel, GpuSpec, Inventory
from services.notify import Notifier
from services.store.engine import Database
from services.tenants import commands as tenant_commands

TENANT = Principal("t", Role.TENANT, tenant_id="acme")


async def cancelled_allocation(store: Database) -> str:
    """An allocation of one node, cancelled without waking any releaser."""
    await tenant_commands.create(store, "acme", "")
    gpus = tuple(GpuSpec(f"GPU-n1-{i}", i) for i in range(8))
    await node_commands.register(store, CONTROL_PLANE, Inventory("n1", GpuModel.H100, gpus, "z", "r", "l"))
    await node_commands.complete_burn_in(store, CONTROL_PLANE, "n1", passed=True, detail="")
    view = (await commands.create(store, AllocationRequest("acme", GpuModel.H100, 1, "k1"))).view
    await commands.cancel(store, TENANT, view.row.allocation_id)
    return view.row.allocation_id


def count_write_transactions(store: Database, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every ``store.transact`` call from now on, recorded (and run as before)."""
    calls: list[object] = []
    transact = store.transact

    def counted(make: Callable[[], Any]) -> Any:
        calls.append(make)
        return transact(make)

    monkeypatch.setattr(store, "transact", counted)
    return calls


async def test_an_idle_poll_writes_nothing(store: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    writes = count_write_transactions(store, monkeypatch)
    releaser = Releaser(store, scrub_seconds=0, wake=Notifier(), done=Notifier())
    assert await releaser.poll() is None
    assert writes == []


async def test_a_poll_before_the_scrub_is_done_writes_nothing_and_says_when(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    allocation_id = await cancelled_allocation(store)
    writes = count_write_transactions(store, monkeypatch)
    releaser = Releaser(store, scrub_seconds=600, wake=Notifier(), done=Notifier())
    due_us = await releaser.poll()
    cancelled = await commands.get(store, TENANT, allocation_id)
    assert cancelled.row.cancel_us is not None
    assert due_us == cancelled.row.cancel_us + 600_000_000
    assert writes == []
    assert cancelled.row.state == "CANCELLING"


async def test_a_poll_releases_a_cancel_nobody_woke_it_for(store: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    allocation_id = await cancelled_allocation(store)
    writes = count_write_transactions(store, monkeypatch)
    done = Notifier()
    releaser = Releaser(store, scrub_seconds=0, wake=Notifier(), done=done)
    assert await releaser.poll() is None
    released = await commands.get(store, TENANT, allocation_id)
    assert released.row.state == "CANCELLED"
    assert done.generation == 1
    assert len(writes) == 1

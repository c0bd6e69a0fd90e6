"""The releaser's timer passes read before they write: an idle fleet costs no write
transaction a second, and a cancel that woke nobody here (another replica's) is still released.
A node taken from a live allocation no agent runs is scrubbed likewise."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from services.allocations import commands, relocation
from services.allocations.defrag import Move
from services.allocations.releaser import Releaser
from services.allocations.requests import AllocationRequest
from services.auth.principal import CONTROL_PLANE, Principal, Role
from services.nodes import commands as node_commands
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel, GpuSpec, Inventory
from services.nodes.transitions import NodeEvent
from services.notify import Notifier
from services.store.engine import Database
from services.tenants import commands as tenant_commands

TENANT = Principal("t", Role.TENANT, tenant_id="acme")


async def tenant_and_nodes(store: Database, *node_ids: str) -> None:
    """Tenant acme, and READY H100 nodes of ``node_ids`` no agent runs."""
    await tenant_commands.create(store, "acme", "")
    for node_id in node_ids:
        gpus = tuple(GpuSpec(f"GPU-{node_id}-{i}", i) for i in range(8))
        await node_commands.register(store, CONTROL_PLANE, Inventory(node_id, GpuModel.H100, gpus, "z", "r", "l"))
        await node_commands.complete_burn_in(store, CONTROL_PLANE, node_id, passed=True, detail="")


async def cancelled_allocation(store: Database) -> str:
    """An allocation of one node, cancelled without waking any releaser."""
    await tenant_and_nodes(store, "n1")
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


async def moved_allocation(store: Database) -> str:
    """A one-node allocation on n1 moved to n2 by an operator's go: n1 is taken, SCRUBBING."""
    await tenant_and_nodes(store, "n1", "n2")
    view = (await commands.create(store, AllocationRequest("acme", GpuModel.H100, 1, "k1"))).view
    assert view.node_ids == ("n1",)
    moves = [Move(view.row.allocation_id, "", "n1", "n2")]
    await store.transact(partial(relocation.apply, moves, actor="operator:test", locking=store.dialect == "postgresql"))
    return view.row.allocation_id


async def test_a_taken_nodes_scrub_is_read_for_until_due_then_finished_in_one_write(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    allocation_id = await moved_allocation(store)
    taken = await store.query(nodes_repo.get_row("n1"))
    assert taken.state == "SCRUBBING"
    writes = count_write_transactions(store, monkeypatch)
    assert await Releaser(store, scrub_seconds=600, wake=Notifier(), done=Notifier()).poll() == (
        taken.state_changed_us + 600_000_000
    )
    assert writes == []

    freed = Notifier()
    releaser = Releaser(store, scrub_seconds=0, wake=Notifier(), done=Notifier(), freed=freed)
    assert await releaser.poll() is None
    assert (await store.query(nodes_repo.get_row("n1"))).state == "READY"
    assert (len(writes), freed.generation) == (1, 1)
    # The allocation runs on, on n2; a cancel's pass finds no taken node left to scrub.
    assert (await commands.get(store, TENANT, allocation_id)).node_ids == ("n2",)
    assert await releaser.release_due() is None
    assert len(writes) == 2


async def test_a_node_drained_before_it_was_taken_leaves_service_after_its_scrub(store: Database) -> None:
    await tenant_and_nodes(store, "n1", "n2")
    view = (await commands.create(store, AllocationRequest("acme", GpuModel.H100, 1, "k1"))).view
    # The operator drains n1 under its job, then moves the job off rather than wait for its end.
    await node_commands.transition(store, CONTROL_PLANE, "n1", NodeEvent.DRAIN, "fan noise")
    moves = [Move(view.row.allocation_id, "", "n1", "n2")]
    await store.transact(partial(relocation.apply, moves, actor="operator:test", locking=store.dialect == "postgresql"))
    assert await Releaser(store, scrub_seconds=0, wake=Notifier(), done=Notifier()).poll() is None
    assert (await store.query(nodes_repo.get_row("n1"))).state == "QUARANTINED"

"""A store fixture with one tenant and one READY node, for the tests of rows that race on a node."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.auth.principal import CONTROL_PLANE
from services.nodes import commands as node_commands
from services.nodes.inventory import GpuModel, GpuSpec, Inventory
from services.store.engine import Database
from services.tenants import commands as tenant_commands


@pytest.fixture(name="store")
async def store_with_one_node(database_url: str) -> AsyncIterator[Database]:
    """The store, with tenant acme and one READY node, n1, of 8 GPUs. A module that imports
    this fixture gets it as ``store`` in place of the empty one."""
    opened = await Database.open(database_url)
    try:
        await tenant_commands.create(opened, "acme", "")
        gpus = tuple(GpuSpec(f"GPU-n1-{i}", i) for i in range(8))
        await node_commands.register(opened, CONTROL_PLANE, Inventory("n1", GpuModel.H100, gpus, "z", "r", "l"))
        await node_commands.complete_burn_in(opened, CONTROL_PLANE, "n1", passed=True, detail="")
        yield opened
    finally:
        await opened.close()

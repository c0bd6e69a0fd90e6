"""What operators do with the health controller: pause and resume its removals per pool."""

from __future__ import annotations

from functools import partial

from services.auth.principal import Principal
from services.clock import now_us
from services.health import repository as repo
from services.health.repository import Automation
from services.nodes.inventory import GpuModel
from services.store.engine import Database
from services.store.tx import Tx


async def set_automation(
    store: Database, principal: Principal, gpu_model: GpuModel, *, paused: bool, reason: str
) -> Automation:
    """Pause (or resume) the health controller's removals in ``gpu_model``'s pool."""
    return await store.transact(
        partial(
            repo.set_automation, gpu_model.value, paused=paused, reason=reason, actor=principal.actor, now_us=now_us()
        )
    )


async def automations(store: Database) -> list[Automation]:
    """Every pool's setting, in ``GpuModel``'s order."""

    def read() -> Tx[list[Automation]]:
        pools = []
        for model in GpuModel:
            pools.append((yield from repo.automation(model.value)))
        return pools

    return await store.query(read())

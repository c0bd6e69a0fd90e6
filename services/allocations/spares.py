"""The spare pool of each GPU model: free nodes that creates leave for replacements.

A replacement (replacement.py) needs a free node of the removed node's model at the moment the
health controller pulls it; a pool that creates fill to the last node has none, and the
allocation runs degraded. The operator sizes the reserve (docs/health.md has the arithmetic:
failures a day times the repair turnaround). It is a count, not a set of named nodes: a create
fits only while at least that many free nodes stay behind, and any free node can be the spare.

On PostgreSQL a create reads the reserve with its row locked, so the creates of a model with a
reserve run one at a time between that read and their commit: two concurrent creates that each
leave the reserve alone would otherwise together take it. A model without a reserve (never
given one, or set to 0) locks nothing here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from services.auth.principal import Principal
from services.clock import now_us
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel
from services.store.engine import Database
from services.store.tx import Sql, Tx, for_update


@dataclass(frozen=True, slots=True)
class SparePool:
    """A model's reserve as set (``updated_us`` None: never set, so none), and how many of its
    nodes are free now."""

    gpu_model: str
    spares: int
    free: int
    actor: str
    updated_us: int | None


def reserve(gpu_model: GpuModel, *, locking: bool) -> Tx[int]:
    """How many free ``gpu_model`` nodes a create must leave; the row locked when ``locking``."""
    found = (
        yield Sql(
            # A reserve of 0 is not locked: no create could take from it.
            "SELECT spares FROM spare_pools WHERE gpu_model = :model AND spares > 0" + for_update(locking),
            {"model": gpu_model.value},
        )
    ).first()
    return 0 if found is None else int(found[0])


def pool(gpu_model: GpuModel) -> Tx[SparePool]:
    """``gpu_model``'s reserve and its free nodes now."""
    found = (
        yield Sql(
            "SELECT spares, actor, updated_us FROM spare_pools WHERE gpu_model = :model", {"model": gpu_model.value}
        )
    ).first()
    free = yield from nodes_repo.count_free(gpu_model)
    if found is None:
        return SparePool(gpu_model.value, 0, free, "", None)
    spares, actor, updated = found
    return SparePool(gpu_model.value, int(spares), free, str(actor), int(updated))


def _set(gpu_model: GpuModel, spares: int, *, actor: str, now_us: int) -> Tx[SparePool]:
    before = yield from pool(gpu_model)
    if before.updated_us is not None and before.spares == spares:
        return before  # unchanged: its actor and time stay those of the change
    yield Sql(
        "INSERT INTO spare_pools (gpu_model, spares, actor, updated_us) VALUES (:model, :spares, :actor, :now)"
        " ON CONFLICT (gpu_model) DO UPDATE SET"
        " spares = excluded.spares, actor = excluded.actor, updated_us = excluded.updated_us",
        {"model": gpu_model.value, "spares": spares, "actor": actor, "now": now_us},
    )
    return SparePool(gpu_model.value, spares, before.free, actor, now_us)


async def set_spares(store: Database, principal: Principal, gpu_model: GpuModel, spares: int) -> SparePool:
    """Keep ``spares`` free ``gpu_model`` nodes from creates. Nodes allocated already stay so:
    a reserve larger than what is free refuses creates until enough nodes free up."""
    return await store.transact(partial(_set, gpu_model, spares, actor=principal.actor, now_us=now_us()))


async def pools(store: Database) -> list[SparePool]:
    """Every model's reserve and free nodes, in ``GpuModel``'s order."""

    def read() -> Tx[list[SparePool]]:
        found = []
        for model in GpuModel:
            found.append((yield from pool(model)))
        return found

    return await store.query(read())

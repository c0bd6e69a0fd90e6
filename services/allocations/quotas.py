"""Quotas: how many nodes of a GPU model each tenant may hold, and what its cohort lends it.

A tenant with a quota for a model may hold ``nodes`` of them (its nominal quota) and borrow up
to ``borrow_limit`` more from the quota its cohort's other tenants leave unused; a tenant
without one is not limited. Quota and capacity are separate: an allocation within its quota
may still wait for free nodes, and one over it waits (QUOTA_EXCEEDED) without holding up other
tenants' work, whatever is free.

A quota of N nodes is N nodes' GPUs, so part-node work counts too: a whole-node allocation
uses every GPU of its nodes, a part-node one what it is billed by (its GPUs, its MIG slice's
fraction or its share; nothing for CPU and memory alone). ``Ledger`` counts in thousandths of
a GPU (``held_milli``); what it answers in nodes is a nodes' worth, part-node GPUs eight to a
node, rounded up. Only whole nodes are lent: what a cohort leaves unused is counted in whole
nodes, rounded down.

A tenant that wants back what it lent reclaims it: when its allocation fits within its nominal
quota but not in the free nodes, the scheduling cycle preempts allocations of the cohort's
borrowers (tenants holding more than their nominal quota), lowest priority first, then the most
recently admitted, and only while their tenant still borrows. The victim is cancelled with the
reason (``preempted_reason``), and the allocation waits (WAITING_FOR_PREEMPTION) while their
nodes are scrubbed. ``Ledger`` keeps these counts for one model during a cycle; no I/O there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import scheduling
from services.allocations import part_node
from services.allocations.repository import Allocation
from services.allocations.states import AllocationState
from services.auth.principal import Principal
from services.clock import now_us
from services.nodes.inventory import GPUS_PER_NODE, GpuModel
from services.store.engine import Database
from services.store.tx import Sql, Tx, for_update
from services.tenants import repository as tenants_repo

# A node's worth of quota, in thousandths of a GPU.
NODE_MILLI = GPUS_PER_NODE * 1000


def held_milli(row: Allocation) -> int:
    """What ``row`` counts against its tenant's quota, in thousandths of a GPU: every GPU of
    its nodes, or for part of a node what it is billed by."""
    if not row.part_node:
        return row.node_count * NODE_MILLI
    return scheduling.gpu_milli(part_node.request_of(row))


def nodes_worth(milli: int) -> int:
    """``milli`` thousandths of a GPU as nodes, a part of one counted whole."""
    return -(-milli // NODE_MILLI)


@dataclass(frozen=True, slots=True)
class Quota:
    """A tenant's quota of one model, and what the tenant holds of the model now, in
    thousandths of a GPU (``usage``)."""

    tenant_id: str
    gpu_model: str
    nodes: int
    borrow_limit: int
    cohort: str
    actor: str
    updated_us: int
    used_milli: int = 0

    @property
    def used(self) -> int:
        """What the tenant holds as nodes, a part of one counted whole (``nodes_worth``)."""
        return nodes_worth(self.used_milli)


class Ledger:
    """The quotas of one model's tenants and what each holds, as a cycle admits and preempts:
    amounts held and asked are thousandths of a GPU (``held_milli``), quotas and limits nodes."""

    def __init__(self, quotas: Iterable[Quota], used_milli: Mapping[str, int]) -> None:
        self._quotas = {q.tenant_id: q for q in quotas}
        self._used = dict(used_milli)

    def limited(self, tenant: str) -> bool:
        """Whether ``tenant`` has a quota of the model."""
        return tenant in self._quotas

    def used_milli(self, tenant: str) -> int:
        """The thousandths of the model's GPUs ``tenant`` holds."""
        return self._used.get(tenant, 0)

    def used(self, tenant: str) -> int:
        """The nodes' worth of the model ``tenant`` holds."""
        return nodes_worth(self.used_milli(tenant))

    def nominal(self, tenant: str) -> int:
        """``tenant``'s own quota."""
        return self._quotas[tenant].nodes

    def limit(self, tenant: str) -> int:
        """The most ``tenant`` may hold now: its quota, and what it may borrow of its cohort's unused quota."""
        quota = self._quotas[tenant]
        return quota.nodes + min(quota.borrow_limit, self._lendable(quota.cohort, tenant))

    def fits(self, tenant: str, milli: int) -> bool:
        """Whether ``tenant`` may take ``milli`` more; always, for a tenant without a quota."""
        return not self.limited(tenant) or self.used_milli(tenant) + milli <= self.limit(tenant) * NODE_MILLI

    def within_nominal(self, tenant: str, milli: int) -> bool:
        """Whether ``tenant`` has a quota and ``milli`` more stay inside it: what it may reclaim."""
        return self.limited(tenant) and self.used_milli(tenant) + milli <= self.nominal(tenant) * NODE_MILLI

    def borrowed_milli(self, tenant: str) -> int:
        """How much more than its own quota ``tenant`` holds (0 or less: it borrows nothing)."""
        return self.used_milli(tenant) - self.nominal(tenant) * NODE_MILLI

    def same_cohort(self, tenant: str, other: str) -> bool:
        """Whether both tenants have a quota in one cohort."""
        a, b = self._quotas.get(tenant), self._quotas.get(other)
        return a is not None and b is not None and bool(a.cohort) and a.cohort == b.cohort

    def take(self, tenant: str, milli: int) -> None:
        """``tenant`` holds ``milli`` more."""
        self._used[tenant] = self.used_milli(tenant) + milli

    def give_back(self, tenant: str, milli: int) -> None:
        """``tenant`` holds ``milli`` fewer."""
        self._used[tenant] = self.used_milli(tenant) - milli

    def _lendable(self, cohort: str, borrower: str) -> int:
        if not cohort:
            return 0
        unused = sum(
            max(q.nodes * NODE_MILLI - self.used_milli(t), 0)
            for t, q in self._quotas.items()
            if q.cohort == cohort and t != borrower
        )
        return unused // NODE_MILLI


_COLUMNS = "tenant_id, gpu_model, nodes, borrow_limit, cohort, actor, updated_us"


def of_model(gpu_model: str, *, locking: bool = False) -> Tx[list[Quota]]:
    """Every quota of ``gpu_model``; locked when ``locking`` (PostgreSQL), so that the creates
    and cycles that count them run one at a time: two that each fit alone could together
    exceed a quota, or borrow the same unused quota twice."""
    result = yield Sql(
        f"SELECT {_COLUMNS} FROM quotas WHERE gpu_model = :model ORDER BY tenant_id" + for_update(locking),
        {"model": gpu_model},
    )
    return [_quota(row) for row in result.rows]


def _quota(row: Sequence[Any]) -> Quota:
    """A ``quotas`` row (``_COLUMNS``), with what the tenant holds when the row carries it."""
    tenant, model, nodes, borrow, cohort, actor, updated, *used = row
    return Quota(str(tenant), str(model), int(nodes), int(borrow), str(cohort), str(actor), int(updated), *used)


def ledger(gpu_model: str, *, locking: bool) -> Tx[Ledger | None]:
    """The model's quotas and what each tenant holds; None when the model has no quota."""
    limits = yield from of_model(gpu_model, locking=locking)
    if not limits:
        return None
    held = yield from usage(gpu_model=gpu_model)
    return Ledger(limits, {tenant: milli for (tenant, _), milli in held.items()})


def usage(*, gpu_model: str | None = None, tenant_id: str | None = None) -> Tx[dict[tuple[str, str], int]]:
    """The thousandths of a GPU each tenant's ACTIVE allocations hold, by tenant and model
    (whole nodes by what they asked, part-node ones by their live holds); of one model or one
    tenant only when named."""
    where, params = "a.state = :active", {"active": AllocationState.ACTIVE.value}
    if gpu_model is not None:
        where, params["model"] = where + " AND a.gpu_model = :model", gpu_model
    if tenant_id is not None:
        where, params["tenant"] = where + " AND a.tenant_id = :tenant", tenant_id
    whole = yield Sql(
        f"SELECT a.tenant_id, a.gpu_model, SUM(a.node_count) FROM allocations a WHERE {where}"
        " GROUP BY a.tenant_id, a.gpu_model",
        params,
    )
    part = yield Sql(
        "SELECT a.tenant_id, a.gpu_model, SUM(h.milli) FROM gpu_holds h JOIN allocations a"
        f" ON a.allocation_id = h.allocation_id WHERE {where} AND h.released_us IS NULL"
        " GROUP BY a.tenant_id, a.gpu_model",
        params,
    )
    used: dict[tuple[str, str], int] = {}
    for rows, unit in ((whole.rows, NODE_MILLI), (part.rows, 1)):
        for tenant, model, amount in rows:
            key = (str(tenant), str(model))
            used[key] = used.get(key, 0) + int(amount) * unit
    return used


def _list(tenant_id: str | None, *, tenant_must_exist: bool = False) -> Tx[list[Quota]]:
    if tenant_must_exist and tenant_id is not None:
        yield from tenants_repo.require(tenant_id)
    params: dict[str, str] = {}
    where = ""
    if tenant_id:
        where, params["tenant"] = "WHERE tenant_id = :tenant", tenant_id
    result = yield Sql(f"SELECT {_COLUMNS} FROM quotas {where} ORDER BY tenant_id, gpu_model", params)
    held = yield from usage(tenant_id=tenant_id or None)
    return [_quota((*row, held.get((str(row[0]), str(row[1])), 0))) for row in result.rows]


def _set(
    tenant_id: str, gpu_model: GpuModel, nodes: int, borrow_limit: int, cohort: str, *, actor: str, now: int
) -> Tx[Quota]:
    yield from tenants_repo.require(tenant_id)
    yield Sql(
        "INSERT INTO quotas (tenant_id, gpu_model, nodes, borrow_limit, cohort, actor, updated_us)"
        " VALUES (:tenant, :model, :nodes, :borrow, :cohort, :actor, :now) ON CONFLICT (tenant_id, gpu_model)"
        " DO UPDATE SET nodes = excluded.nodes, borrow_limit = excluded.borrow_limit, cohort = excluded.cohort,"
        " actor = excluded.actor, updated_us = excluded.updated_us",
        {
            "tenant": tenant_id,
            "model": gpu_model.value,
            "nodes": nodes,
            "borrow": borrow_limit,
            "cohort": cohort,
            "actor": actor,
            "now": now,
        },
    )
    [quota] = [q for q in (yield from _list(tenant_id)) if q.gpu_model == gpu_model.value]
    return quota


async def set_quota(
    store: Database,
    principal: Principal,
    tenant_id: str,
    gpu_model: GpuModel,
    nodes: int,
    borrow_limit: int,
    cohort: str,
) -> Quota:
    """Set ``tenant_id``'s quota of ``gpu_model``; NOT_FOUND for an unknown tenant. Allocations
    held already stay: a quota below what the tenant holds makes its next creates wait."""
    return await store.transact(
        partial(_set, tenant_id, gpu_model, nodes, borrow_limit, cohort, actor=principal.actor, now=now_us())
    )


async def quotas(store: Database, tenant_id: str | None, *, tenant_must_exist: bool = False) -> list[Quota]:
    """Every quota (of ``tenant_id`` only, when given), with what each tenant holds, by tenant
    and model. ``tenant_must_exist``: an operator named the tenant, and one that does not exist
    is NOT_FOUND rather than an empty list (as ListAllocations answers)."""
    return await store.query(_list(tenant_id, tenant_must_exist=tenant_must_exist))

"""Taking a node from the allocation that holds it, and giving the allocation another: a spare
for a faulty node (``replace``), or the node a defragmentation move names (``move``).

The health controller (services/health/controller.py) calls ``replace`` in the transaction
that drains a node whose fault the tenant's work cannot run through (DRAIN_NOW and worse). In
that one transaction:

- the tenant stops being billed for the node's GPUs, and stops seeing their metrics, from the
  fault's time (a usage ``stop`` per GPU; an agent cut off from the control plane reports the
  fault later, with its time); its assignment ends, marked as taken rather than released;
- the node moves on RELEASE (DRAINING -> SCRUBBING): its agent scrubs it, and since the drain
  is pending it then leaves service (QUARANTINED), never READY;
- a spare takes the node's place in the allocation's order: a free node of the same GPU model
  that the allocation never held, the nearest in the fabric to the node it replaces (the same
  leaf switch, then rack, then zone), locked on PostgreSQL as a create locks its choice; it
  moves READY -> ALLOCATED and is billed from now. The pool's reserved spares (spares.py) are
  there for this: creates leave them, a replacement may take any free node;
- the replacement is recorded with the evidence, and the allocation shows it. With no spare
  free the allocation runs on fewer nodes and says it is degraded, and why, until ``top_up``
  (run by the leader's sweep, degraded.py) gives it a spare once a node of the model frees.

An operator's defragmentation move (relocation.py) is the same hand-over to a node the operator
chose, healthy node and all: billing moves at one instant, and the node left goes to its scrub
and then back to READY.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Set as AbstractSet

import scheduling
from services.allocations import placement
from services.allocations import repository as repo
from services.allocations.placement import Candidate, Pool
from services.allocations.repository import Allocation, Holding, Replacement
from services.allocations.states import AllocationState
from services.clock import now_us
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel
from services.nodes.repository import Node
from services.nodes.transitions import NodeEvent, NodeState
from services.store.tx import Tx
from services.usage import repository as usage
from services.usage.repository import UsageKind

# Rounds of "the chosen spare was locked or taken meanwhile, choose again" on PostgreSQL:
# passing over locks first (a round trip a round), then waiting for them.
_SKIPPING_ROUNDS = 32
_WAITING_ROUNDS = 4


def lock_holder(node_id: str) -> Tx[None]:
    """Lock the allocation holding ``node_id`` now, if one does (PostgreSQL), before the caller
    locks the node: a cancel locks the allocation, then its nodes, and the other order
    deadlocks with it. ``replace`` reads the holding again once the node is locked."""
    held = yield from repo.holding(node_id)
    if held is not None:
        yield from repo.get_row(held.allocation.allocation_id, tenant_id=None, locking=True)


def replace(node: Node, reason: str, *, actor: str, locking: bool, fault_us: int) -> Tx[Replacement | None]:
    """Take the DRAINING ``node`` from its active allocation and give that a spare, as steps of
    the caller's transaction; the replacement made, or None when no active allocation holds it.
    The tenant stops paying for the node's GPUs from ``fault_us``, when the fault happened (an
    agent that could not reach the control plane reports it later), but not before the node
    was handed over."""
    held = yield from repo.holding(node.node_id)
    if held is None or held.allocation.state != AllocationState.ACTIVE.value:
        return None
    allocation_id = held.allocation.allocation_id
    now = now_us()
    yield from _take(node, held, stop_us=min(now, max(fault_us, held.assigned_us)), now=now)
    # Never a node the allocation held before: its usage event ids (allocation/GPU/kind) are taken.
    excluding = yield from repo.ever_assigned(allocation_id)
    placed = yield from _spare(held.allocation, node, held.position, excluding, actor=actor, locking=locking)
    spare, spare_us = (None, None) if placed is None else placed
    why = f"taken from {allocation_id}" + (f", {spare} replaces it" if spare else ", no spare free")
    return (
        yield from _record(
            node, held, Replacement(node.node_id, spare, held.position, reason, now, spare_us), why, actor
        )
    )


def move(node: Node, held: Holding, to_node_id: str, reason: str, *, actor: str) -> Tx[Replacement]:
    """Move ``held``'s allocation from ``node`` to the free ``to_node_id`` (locked by the caller,
    and never held by the allocation before), as steps of the caller's transaction: the tenant
    pays for the one node's GPUs until now and the other's from now, ``node`` goes to its scrub,
    and the move is recorded as a replacement with ``reason``."""
    now = now_us()
    allocation_id = held.allocation.allocation_id
    yield from _take(node, held, stop_us=now, now=now)
    yield from _give(
        held.allocation, to_node_id, held.position, f"moved here from {node.node_id}", actor=actor, now=now
    )
    made = Replacement(node.node_id, to_node_id, held.position, reason, now, now)
    return (yield from _record(node, held, made, f"{allocation_id} moved to {to_node_id}", actor))


def _take(node: Node, held: Holding, *, stop_us: int, now: int) -> Tx[None]:
    """Stop billing ``held``'s allocation for ``node`` at ``stop_us`` and end its assignment, as taken."""
    allocation_id = held.allocation.allocation_id
    yield from usage.record(UsageKind.STOP, [allocation_id], at_us=stop_us, node_ids=[node.node_id])
    yield from repo.take_node(allocation_id, node.node_id, now_us=now)


def _record(node: Node, held: Holding, made: Replacement, why: str, actor: str) -> Tx[Replacement]:
    """Send the taken ``node`` to its scrub, saying ``why``, and record ``made`` under the allocation."""
    release = nodes_repo.Move(node.node_id, NodeState(node.state), NodeEvent.RELEASE, reason=why)
    yield from nodes_repo.apply_many([release], reason="", actor=actor, now_us=made.at_us)
    yield from repo.insert_replacement(held.allocation.allocation_id, made)
    return made


def _give(allocation: Allocation, node_id: str, position: int, why: str, *, actor: str, now: int) -> Tx[None]:
    """Hand the free ``node_id`` to the allocation at ``position``, billed from ``now``."""
    allocate = nodes_repo.Move(
        node_id, NodeState.READY, NodeEvent.ALLOCATE, reason=f"{allocation.allocation_id}: {why}"
    )
    # Guarded by placeability too: a cordon committed since the node was chosen stops the hand-over.
    yield from nodes_repo.apply_many([allocate], reason="", actor=actor, now_us=now, uncordoned_only=True)
    yield from repo.assign(Holding(allocation, position, now), node_id, now_us=now)
    yield from usage.record(UsageKind.START, [allocation.allocation_id], at_us=now, node_ids=[node_id])


def top_up(allocation_id: str, *, actor: str, locking: bool) -> Tx[Replacement | None]:
    """Give the allocation a spare for its oldest removed node no spare has replaced yet, if a
    node of its model is free, as one transaction; the replacement filled, or None. One a
    transaction: placing a second spare while holding the first could wait on a create that
    holds the second and waits for the first. Nothing for an allocation no longer ACTIVE (a
    cancel, which locks the allocation first, as this does, has released it)."""
    row = yield from repo.get_row(allocation_id, tenant_id=None, locking=locking)
    if row.state != AllocationState.ACTIVE.value:
        return None
    made = (yield from repo.replacements([allocation_id])).get(allocation_id, ())
    waiting = next((r for r in made if r.spare_node_id is None), None)
    if waiting is None:
        return None
    removed = yield from nodes_repo.get_row(waiting.removed_node_id)
    excluding = yield from repo.ever_assigned(allocation_id)
    placed = yield from _spare(row, removed, waiting.position, excluding, actor=actor, locking=locking)
    if placed is None:
        return None
    spare, now = placed
    yield from repo.fill_replacement(allocation_id, removed.node_id, spare, now_us=now)
    return dataclasses.replace(waiting, spare_node_id=spare, spare_us=now)


def _spare(
    allocation: Allocation,
    removed: Node,
    position: int,
    excluding: AbstractSet[str],
    *,
    actor: str,
    locking: bool,
) -> Tx[tuple[str, int] | None]:
    """Place a spare for ``removed`` at ``position`` of the allocation, the free node nearest it
    in the fabric but those ``excluding`` (under its leaf switch for a ``same_block``
    allocation, which stays degraded until one frees there), billed from when it is held (the
    clock read once the spare is locked); the spare and that time, or None when none is free."""
    anchor = Candidate(removed.zone, removed.rack, removed.leaf_switch, removed.node_id)
    near = placement.nearest_to(anchor, within_leaf=allocation.same_block)
    model = GpuModel(allocation.gpu_model)
    spare = yield from _lock_spare(model, near, allocation.tenant_id, excluding, locking=locking)
    if spare is None:
        return None
    now = now_us()
    yield from _give(allocation, spare, position, f"spare for {removed.node_id}", actor=actor, now=now)
    return spare, now


def _lock_spare(
    gpu_model: GpuModel, policy: scheduling.Policy, tenant: str, excluding: AbstractSet[str], *, locking: bool
) -> Tx[str | None]:
    """The free node ``policy`` chooses among those of the model but ``excluding``, locked on
    PostgreSQL; None when none is free.

    On PostgreSQL the choice may be locked by another transaction, or taken meanwhile: pass
    over locked nodes and choose again without them, then, before answering None, look again
    and wait for the locks. Waiting with no node held forms no lock cycle."""
    pool = Pool((yield from _candidates(gpu_model, excluding)))
    if not locking:
        # SQLite: the writer holds the one write lock, so what was read stays free.
        return _choose(pool, policy, tenant)
    for skip_locked, rounds in ((True, _SKIPPING_ROUNDS), (False, _WAITING_ROUNDS)):
        for _ in range(rounds):
            spare = _choose(pool, policy, tenant)
            if spare is None:
                break
            if (yield from nodes_repo.lock_free([spare], skip_locked=skip_locked)):
                return spare
            pool.take([spare])  # taken or locked by another transaction
        pool = Pool((yield from _candidates(gpu_model, excluding)))
    return None


def _choose(pool: Pool, policy: scheduling.Policy, tenant: str) -> str | None:
    chosen = pool.choose(policy, 1, tenant=tenant)
    return None if chosen is None else chosen[0]


def _candidates(gpu_model: GpuModel, excluding: AbstractSet[str]) -> Tx[list[Candidate]]:
    free = map(Candidate._make, (yield from nodes_repo.free_nodes(gpu_model)))
    return [c for c in free if c.node_id not in excluding]

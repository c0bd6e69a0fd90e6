"""Taking a faulty node from the allocation that holds it, and giving the allocation a spare.

The health controller (services/health/controller.py) calls ``replace`` in the transaction
that drains a node whose fault the tenant's work cannot run through (DRAIN_NOW and worse). In
that one transaction:

- the tenant stops being billed for the node's GPUs, and stops seeing their metrics, from the
  fault's time (a usage ``stop`` per GPU; an agent cut off from the control plane reports the
  fault later, with its time); its assignment ends, marked as taken rather than released;
- the node moves on RELEASE (DRAINING -> SCRUBBING): its agent scrubs it, and since the drain
  is pending it then leaves service (QUARANTINED), never READY;
- a spare takes the node's place in the allocation's order: a free node of the same GPU model
  that the allocation never held, chosen by the placement policy among every free node, as a
  create chooses (so on PostgreSQL it is locked the same way); it moves READY -> ALLOCATED and
  is billed from now;
- the replacement is recorded with the evidence, and the allocation shows it. With no spare
  free the allocation runs on fewer nodes and says it is degraded, and why.

A spare is any free node of the pool: the operator sizes the pool's headroom (docs/health.md
has the arithmetic); a separately reserved spare pool is not modelled.
"""

from __future__ import annotations

from services.allocations import repository as repo
from services.allocations.commands import place
from services.allocations.repository import Replacement
from services.allocations.states import AllocationState
from services.clock import now_us
from services.nodes import repository as nodes_repo
from services.nodes.inventory import GpuModel
from services.nodes.repository import Node
from services.nodes.transitions import NodeEvent, NodeState
from services.store.tx import Tx
from services.usage import repository as usage
from services.usage.repository import UsageKind


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
    stop_us = min(now, max(fault_us, held.assigned_us))
    yield from usage.record(UsageKind.STOP, [allocation_id], at_us=stop_us, node_ids=[node.node_id])
    yield from repo.take_node(allocation_id, node.node_id, now_us=now)
    # Never a node the allocation held before: its usage event ids (allocation/GPU/kind) are taken.
    excluding = yield from repo.ever_assigned(allocation_id)
    chosen = yield from place(GpuModel(held.allocation.gpu_model), 1, locking=locking, excluding=excluding)
    spare = None if chosen is None else chosen[0]
    moves = [
        nodes_repo.Move(
            node.node_id,
            NodeState(node.state),
            NodeEvent.RELEASE,
            reason=f"taken from {allocation_id}" + (f", {spare} replaces it" if spare else ", no spare free"),
        )
    ]
    if spare is not None:
        moves.append(
            nodes_repo.Move(
                spare, NodeState.READY, NodeEvent.ALLOCATE, reason=f"{allocation_id}: spare for {node.node_id}"
            )
        )
    yield from nodes_repo.apply_many(moves, reason="", actor=actor, now_us=now)
    if spare is not None:
        yield from repo.assign(held, spare, now_us=now)
        yield from usage.record(UsageKind.START, [allocation_id], at_us=now, node_ids=[spare])
    made = Replacement(node.node_id, spare, held.position, reason, now)
    yield from repo.insert_replacement(allocation_id, made)
    return made

"""The node lifecycle: every state a node can be in and the one table of moves between them.

Nothing changes a node's state except ``next_state``; an event that the table does not list
for the node's current state is FAILED_PRECONDITION and changes nothing. docs/architecture.md
renders this table.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from services.errors import FailedPrecondition


class NodeState(StrEnum):
    """Where a node is in its lifecycle; only ``next_state`` moves it."""

    REGISTERED = "REGISTERED"
    BURN_IN = "BURN_IN"
    READY = "READY"
    ALLOCATED = "ALLOCATED"
    SCRUBBING = "SCRUBBING"
    DRAINING = "DRAINING"
    QUARANTINED = "QUARANTINED"
    REPAIR = "REPAIR"
    RETIRED = "RETIRED"


class NodeEvent(StrEnum):
    """Something that happens to a node, as ``node_events`` records it: ``TRANSITIONS``' inputs,
    and ``REGISTER``, ``CORDON`` and ``UNCORDON``, which change no state."""

    # A node's first record, written when it is registered (in REGISTERED): not an event of the
    # table, since nothing moves a node into REGISTERED.
    REGISTER = "REGISTER"
    # The cordon flag set or cleared by an operator (or a changed cordon reason): recorded with
    # from_state == to_state, since a cordon is not a state. Not inputs of the table either.
    CORDON = "CORDON"
    UNCORDON = "UNCORDON"
    # Reachability, as the node reconciler judges it from heartbeats: recorded like a cordon,
    # since an unreachable node keeps its state (its tenant may still be using it).
    UNREACHABLE = "UNREACHABLE"
    REACHABLE = "REACHABLE"
    # A drain has waited longer than its timeout for the tenant to release the node: recorded
    # once, for operators; the node stays with its tenant.
    DRAIN_OVERDUE = "DRAIN_OVERDUE"
    # The health controller's decisions that move no state (services/health/controller.py):
    # one that asks for no removal (notify the tenant), and a removal a safety limit held back.
    HEALTH = "HEALTH"
    HEALTH_HELD = "HEALTH_HELD"
    START_BURN_IN = "START_BURN_IN"
    PASS_BURN_IN = "PASS_BURN_IN"
    FAIL_BURN_IN = "FAIL_BURN_IN"
    ALLOCATE = "ALLOCATE"
    RELEASE = "RELEASE"
    FINISH_SCRUB = "FINISH_SCRUB"
    # A drain arrived while the node was held: after the scrub it leaves service.
    FINISH_SCRUB_DRAINED = "FINISH_SCRUB_DRAINED"
    # The agent did not confirm the scrub in time, or confirmed only part of it: never READY dirty.
    FAIL_SCRUB = "FAIL_SCRUB"
    DRAIN = "DRAIN"
    START_REPAIR = "START_REPAIR"
    RETURN_TO_SERVICE = "RETURN_TO_SERVICE"
    RETIRE = "RETIRE"


S = NodeState
E = NodeEvent

TRANSITIONS: Mapping[tuple[NodeEvent, NodeState], NodeState] = {
    (E.START_BURN_IN, S.REGISTERED): S.BURN_IN,
    (E.PASS_BURN_IN, S.BURN_IN): S.READY,
    (E.FAIL_BURN_IN, S.BURN_IN): S.QUARANTINED,
    (E.ALLOCATE, S.READY): S.ALLOCATED,
    (E.RELEASE, S.ALLOCATED): S.SCRUBBING,
    (E.RELEASE, S.DRAINING): S.SCRUBBING,
    (E.FINISH_SCRUB, S.SCRUBBING): S.READY,
    (E.FINISH_SCRUB_DRAINED, S.SCRUBBING): S.QUARANTINED,
    (E.FAIL_SCRUB, S.SCRUBBING): S.QUARANTINED,
    # Nothing to wait for: a free node leaves service at once.
    (E.DRAIN, S.REGISTERED): S.QUARANTINED,
    (E.DRAIN, S.BURN_IN): S.QUARANTINED,
    (E.DRAIN, S.READY): S.QUARANTINED,
    # A held node stays with its tenant until released (Slurm's DRAIN, not Kubernetes' evict).
    (E.DRAIN, S.ALLOCATED): S.DRAINING,
    (E.DRAIN, S.DRAINING): S.DRAINING,
    # Mid-scrub: finish wiping first; FINISH_SCRUB_DRAINED then quarantines it.
    (E.DRAIN, S.SCRUBBING): S.SCRUBBING,
    (E.START_REPAIR, S.QUARANTINED): S.REPAIR,
    # Back to service always goes through burn-in again.
    (E.RETURN_TO_SERVICE, S.QUARANTINED): S.BURN_IN,
    (E.RETURN_TO_SERVICE, S.REPAIR): S.BURN_IN,
    (E.RETIRE, S.REGISTERED): S.RETIRED,
    (E.RETIRE, S.QUARANTINED): S.RETIRED,
    (E.RETIRE, S.REPAIR): S.RETIRED,
}

# States in which a node belongs to a tenant's allocation.
HELD_STATES = frozenset({S.ALLOCATED, S.DRAINING, S.SCRUBBING})


class IllegalTransition(FailedPrecondition):
    """The event is not allowed in the node's current state."""


def next_state(node_id: str, state: NodeState, event: NodeEvent) -> NodeState:
    """The state ``event`` moves a node in ``state`` to, or IllegalTransition."""
    target = TRANSITIONS.get((event, state))
    if target is None:
        allowed = sorted(s for (e, s) in TRANSITIONS if e is event)
        raise IllegalTransition(
            reason="ILLEGAL_NODE_TRANSITION",
            message=f"node {node_id!r} is {state}; {event} is allowed only from {', '.join(allowed)}",
            metadata={"node_id": node_id, "field": "node_id", "state": state, "event": event},
        )
    return target

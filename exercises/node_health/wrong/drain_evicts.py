"""A drain that takes a held node from its tenant at once, as Kubernetes' evict would."""

from __future__ import annotations

from services.health.policy import decide
from services.nodes.transitions import TRANSITIONS, IllegalTransition, NodeEvent, NodeState

__all__ = ["IllegalTransition", "decide", "next_state"]

_TABLE = {**TRANSITIONS, (NodeEvent.DRAIN, NodeState.ALLOCATED): NodeState.QUARANTINED}


def next_state(node_id: str, state: NodeState, event: NodeEvent) -> NodeState:
    """Wrong: DRAIN of an ALLOCATED node quarantines it under its tenant."""
    target = _TABLE.get((event, state))
    if target is None:
        raise IllegalTransition(reason="ILLEGAL_NODE_TRANSITION", message=f"{node_id}: {event} from {state}")
    return target

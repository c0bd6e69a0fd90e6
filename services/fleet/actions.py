"""What a node's agent is asked to do in each state: a pure function of the node's record.

An action's id names one attempt: the kind and the instant the node entered the state. The id
is the same in every answer until the node leaves the state, so an agent that hears it twice
does the work once, and a result of an earlier attempt (a burn-in before a repair) never
answers a later one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from services.nodes.transitions import NodeState


class ActionKind(StrEnum):
    """Work an agent does for the control plane and reports."""

    BURN_IN = "burn_in"
    SCRUB = "scrub"


@dataclass(frozen=True, slots=True)
class Action:
    """One action asked of an agent."""

    action_id: str
    kind: ActionKind


# What a scrub report must confirm, each a field of ScrubReport: the node is READY again only
# when all three are.
SCRUB_STEPS = ("gpus_reset", "disks_wiped", "keys_removed")

# The state in which each action is asked for.
ACTION_OF_STATE = {NodeState.BURN_IN: ActionKind.BURN_IN, NodeState.SCRUBBING: ActionKind.SCRUB}


def action_for(state: NodeState, state_changed_us: int, *, agent_managed: bool) -> Action | None:
    """The action a node in ``state`` since ``state_changed_us`` asks of its agent, if any.
    Nodes without an agent are asked nothing: an operator records their burn-in, and the
    releaser stands in for their scrub."""
    kind = ACTION_OF_STATE.get(state)
    if kind is None or not agent_managed:
        return None
    return Action(f"{kind.value}-{state_changed_us}", kind)

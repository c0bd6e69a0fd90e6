"""The node state machine and health strikes: write ``next_state`` and ``decide``;
`gpucloud exercises check node-health --impl THIS_FILE` runs the suite."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from services.health.policy import Action, Decision, Observation, Rule
from services.nodes.transitions import NodeEvent, NodeState

__all__ = ["Action", "Decision", "IllegalTransition", "NodeEvent", "NodeState", "Observation", "Rule"]


class IllegalTransition(Exception):
    """The event is not allowed in the node's current state."""


def next_state(node_id: str, state: NodeState, event: NodeEvent) -> NodeState:
    """The state ``event`` moves a node in ``state`` to, or IllegalTransition."""
    raise NotImplementedError


def decide(observations: Iterable[Observation], now_s: float, policy: Sequence[Rule]) -> Decision | None:
    """The most severe action any rule of ``policy`` calls for at ``now_s``; None when none fires."""
    raise NotImplementedError

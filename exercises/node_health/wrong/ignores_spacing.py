"""Strikes counted without the rule's spacing: a job retrying into one XID three times in a
minute drains the node."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from services.health import policy
from services.health.policy import Decision, Observation, Rule
from services.nodes.transitions import IllegalTransition, next_state

__all__ = ["IllegalTransition", "decide", "next_state"]


def decide(observations: Iterable[Observation], now_s: float, rules: Sequence[Rule]) -> Decision | None:
    """Wrong: every rule's ``spacing_s`` is taken as 0."""
    return policy.decide(observations, now_s, [dataclasses.replace(rule, spacing_s=0.0) for rule in rules])

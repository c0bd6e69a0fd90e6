"""Health: the policy that turns GPU and node signals into actions, with the evidence, and the
strikes an agent's reported status carries."""

from services.health.policy import POLICY, Action, Decision, Observation, Rule, decide, signal_of_xid
from services.health.signals import GpuReading, observations

__all__ = [
    "POLICY",
    "Action",
    "Decision",
    "GpuReading",
    "Observation",
    "Rule",
    "decide",
    "observations",
    "signal_of_xid",
]

"""Health: the policy that turns GPU and node signals into actions, with the evidence."""

from services.health.policy import POLICY, Action, Decision, Observation, Rule, decide, signal_of_xid

__all__ = ["POLICY", "Action", "Decision", "Observation", "Rule", "decide", "signal_of_xid"]

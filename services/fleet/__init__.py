"""The fleet as its agents report it, and the node reconciler that acts on it.

Agents (AgentService) register their nodes, beat, report status and the results of actions;
the node reconciler, on the replica holding the ``node-reconciler`` lease, reads each node's
desired and observed state and moves it through the transition table: burn-in judged against
the fleet median, scrub confirmed by the agent, timeouts, unreachable nodes.
"""

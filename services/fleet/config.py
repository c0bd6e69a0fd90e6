"""The fleet's timings and thresholds, in one place (docs/agent.md explains each)."""

from __future__ import annotations

from dataclasses import dataclass


class UnusableFleetConfig(ValueError):
    """A timing or threshold that cannot work; the message names it."""


@dataclass(frozen=True)
class FleetConfig:
    """How agents are heard and how the node reconciler judges them."""

    # How often agents are told to send Heartbeat.
    heartbeat_interval_s: float = 10.0
    # A node is marked unreachable after this many intervals without a heartbeat: Kubernetes'
    # node-monitor grace period is four of its 10 s status updates too.
    missed_beats: int = 4
    # Each in-progress state fails the node when it lasts longer than this (MAAS's way).
    burn_in_timeout_s: float = 1800.0
    scrub_timeout_s: float = 1800.0
    drain_timeout_s: float = 86_400.0
    # A burn-in figure further than this fraction under the fleet median of the node's model fails it.
    burn_in_tolerance: float = 0.10
    # Results of the model needed before a median is trusted (fewer when the fleet has fewer nodes).
    burn_in_quorum: int = 3
    # The reconciler's lease: a second replica takes over within ``lease_duration_s`` of a
    # leader's death. The leader renews it every third of that; others try for it every 7.5th.
    lease_duration_s: float = 15.0
    # Concurrent reconciles, and how often every node in progress is looked at again.
    workers: int = 8
    resync_s: float = 5.0
    # How often each replica re-reads node states for its answers to agents.
    directives_refresh_s: float = 1.0

    def __post_init__(self) -> None:
        positive = {
            "heartbeat_interval_s": self.heartbeat_interval_s,
            "burn_in_timeout_s": self.burn_in_timeout_s,
            "scrub_timeout_s": self.scrub_timeout_s,
            "drain_timeout_s": self.drain_timeout_s,
            "resync_s": self.resync_s,
            "directives_refresh_s": self.directives_refresh_s,
        }
        for name, value in positive.items():
            if not value > 0:
                raise UnusableFleetConfig(f"{name} must be > 0, got {value}")
        if self.missed_beats < 3:
            # A row of heartbeats may lag 2.5 intervals behind a beat heard by another replica.
            raise UnusableFleetConfig(f"missed_beats must be >= 3, got {self.missed_beats}")
        if not 0 < self.burn_in_tolerance < 1:
            raise UnusableFleetConfig(f"burn_in_tolerance must be in (0, 1), got {self.burn_in_tolerance}")
        if self.burn_in_quorum < 1 or self.workers < 1:
            raise UnusableFleetConfig("burn_in_quorum and workers must be >= 1")
        if not self.lease_duration_s > 0:
            raise UnusableFleetConfig(f"lease_duration_s must be > 0, got {self.lease_duration_s}")

    @property
    def lease_renew_s(self) -> float:
        """How often the leader renews its lease."""
        return self.lease_duration_s / 3

    @property
    def lease_retry_s(self) -> float:
        """How often a replica that does not lead tries to take the lease."""
        return self.lease_duration_s / 7.5

    @property
    def unreachable_after_s(self) -> float:
        """Silence after which a node is marked unreachable."""
        return self.heartbeat_interval_s * self.missed_beats

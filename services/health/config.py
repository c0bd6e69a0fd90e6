"""The health controller's settings: its safety limits and how often it looks again."""

from __future__ import annotations

import math
from dataclasses import dataclass


class UnusableHealthConfig(ValueError):
    """A limit or setting that cannot work; the message names it (as ``gpucloud serve``'s option)."""


@dataclass(frozen=True)
class HealthConfig:
    """Removals a pool (the nodes of one GPU model) may lose to automation in an hour: the
    larger of ``removals_per_hour`` and ``removal_share_per_hour`` of the pool; and the nodes
    under one leaf switch, ``removals_per_leaf_hour``. Past either the controller removes
    nothing more there and says so: that many nodes failing at once is more likely a
    monitoring, control-plane or network fault than hardware (as Kubernetes slows evictions
    when a whole zone looks down)."""

    removals_per_hour: int = 3
    removal_share_per_hour: float = 0.10
    # Removals under one leaf switch an hour: a switch or its cabling failing makes every node
    # under it look unhealthy at once, and a pool's limit (a tenth of thousands of nodes) would
    # let the whole switch's nodes go.
    removals_per_leaf_hour: int = 3
    # How often every node with recent strikes is looked at again, whatever was missed.
    resync_s: float = 30.0
    # When a removal was held back, how soon it is tried again.
    held_retry_s: float = 60.0
    # The slow-GPU sweep (slow_gpus.py): how often, over how long a window, which field, and how
    # many spreads below the peers' median make a GPU slow. With the spread at least 1% of the
    # median, 5 spreads is at least 5% under the fleet: far past a clock's ordinary wander.
    slow_gpu_interval_s: float = 300.0
    slow_gpu_window_s: float = 300.0
    slow_gpu_field: str = "sm_clock_mhz"
    slow_gpu_k: float = 5.0

    def __post_init__(self) -> None:
        if self.removals_per_leaf_hour < 0:
            raise UnusableHealthConfig(
                f"removals_per_leaf_hour (--health-removals-per-leaf) must be >= 0, got {self.removals_per_leaf_hour}"
            )
        if self.removals_per_hour < 0:
            raise UnusableHealthConfig(
                f"removals_per_hour (--health-removals-per-hour) must be >= 0, got {self.removals_per_hour}"
            )
        if not 0.0 <= self.removal_share_per_hour <= 1.0:
            raise UnusableHealthConfig(
                f"removal_share_per_hour (--health-removal-share) must be within 0-1, got {self.removal_share_per_hour}"
            )
        if not min(self.resync_s, self.held_retry_s, self.slow_gpu_interval_s, self.slow_gpu_window_s) > 0:
            raise UnusableHealthConfig("resync_s, held_retry_s, slow_gpu_interval_s and slow_gpu_window_s must be > 0")
        if not 0 < self.slow_gpu_k < math.inf:
            raise UnusableHealthConfig(f"slow_gpu_k (--slow-gpu-k) must be a number > 0, got {self.slow_gpu_k}")

    def removal_limit(self, pool_size: int) -> int:
        """How many of a pool of ``pool_size`` nodes may be removed in an hour."""
        return max(self.removals_per_hour, math.ceil(self.removal_share_per_hour * pool_size))

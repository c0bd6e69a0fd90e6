"""The errors of the placement library: each a type of its own, so a caller tells a bad request
from a placement that no longer fits."""

from __future__ import annotations


class SchedulingError(Exception):
    """The base of every error this package raises."""


class InvalidRequest(SchedulingError, ValueError):
    """A request no cluster could ever satisfy as written (a GPU count of 3, a share of 0)."""


class UnknownProfile(InvalidRequest):
    """A MIG profile name that is not in the profile table."""


class InvalidCluster(SchedulingError, ValueError):
    """Nodes that cannot form a cluster: a node id twice, a negative capacity."""


class PlacementConflict(SchedulingError):
    """A placement applied where it does not fit (any more), or released when it is not held."""

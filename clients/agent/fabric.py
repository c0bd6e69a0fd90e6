"""The node's fabric partitions (InfiniBand partition keys), behind ``Fabric``: the control plane
says which the node must be in, the agent makes it so and reports what the fabric shows.

``SimulatedFabric`` keeps the membership in memory; ``leak`` plants a membership that joining
never removes, as a subnet manager that failed to apply a leave would leave it (the isolation
audit's violations). ``UnmanagedFabric`` is a node whose agent has no fabric manager to ask:
it joins nothing and reports no partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

MAX_PARTITION_KEY = 0x7FFE


class Fabric(Protocol):
    """The partitions the node is a member of."""

    def join_only(self, keys: Iterable[int]) -> None:
        """Be a member of exactly these partitions: join the missing ones, leave the others."""
        ...

    def partitions(self) -> tuple[int, ...]:
        """The partitions the node is a member of, as the fabric reports them, ascending."""
        ...


class SimulatedFabric:
    """Membership kept in memory, exactly as told, plus any leaked partitions."""

    def __init__(self) -> None:
        self._joined: frozenset[int] = frozenset()
        self._leaked: set[int] = set()

    def join_only(self, keys: Iterable[int]) -> None:
        """Be a member of exactly ``keys`` (and of every leaked partition)."""
        self._joined = frozenset(keys)

    def partitions(self) -> tuple[int, ...]:
        """The joined and the leaked partitions, ascending."""
        return tuple(sorted(self._joined | self._leaked))

    def leak(self, key: int) -> None:
        """Stay in partition ``key`` whatever the node is told from now on."""
        if not 0 < key <= MAX_PARTITION_KEY:
            raise ValueError(f"a partition key is 1-{MAX_PARTITION_KEY}, not {key}")
        self._leaked.add(key)

    def clear(self) -> None:
        """Leave every leaked partition the node was not told to be in."""
        self._leaked.clear()


class UnmanagedFabric:
    """No fabric manager to ask: the node joins nothing and reports no partition."""

    def join_only(self, keys: Iterable[int]) -> None:
        """Nothing to do."""

    def partitions(self) -> tuple[int, ...]:
        """None."""
        return ()

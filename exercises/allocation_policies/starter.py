"""Allocation policies and fragmentation: write the five functions; `gpucloud exercises check
allocation-policies --impl THIS_FILE` runs the suite (a function left raising NotImplementedError
fails only the cases that call it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    """A node: the GPUs it has, how many of them are free, and its fabric block. A node is idle
    when all its GPUs are free. The suite lists nodes in fabric order, a block's nodes together."""

    gpus: int
    free: int
    block: int


def first_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """The index of the node a job of ``gpus`` GPUs (1, 2, 4 or 8, on one node) goes to under
    first fit: the first node in order with at least ``gpus`` free. None when none has."""
    raise NotImplementedError


def best_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """Best fit: among the nodes with at least ``gpus`` free, the one left with the fewest free
    GPUs after the job; ties to the first in order. None when none fits."""
    raise NotImplementedError


def worst_fit(nodes: Sequence[Node], gpus: int) -> int | None:
    """Worst fit: among the nodes with at least ``gpus`` free, the one left with the most free
    GPUs; ties to the first in order. None when none fits."""
    raise NotImplementedError


def place_gang(nodes: Sequence[Node], count: int) -> list[int] | None:
    """The indexes of ``count`` idle nodes for a gang, all in one fabric block: the block with
    the fewest idle nodes that still has ``count``, ties to the first. None when no block has."""
    raise NotImplementedError


def largest_free_block(nodes: Sequence[Node]) -> int:
    """The most idle nodes in one fabric block: the largest gang that can start now (0 when no
    node is idle)."""
    raise NotImplementedError

"""Bounded fan-out: write ``fan_out``; `gpucloud exercises check bounded-fan-out --impl THIS_FILE`
runs the suite (while ``fan_out`` raises NotImplementedError, every case reads "not implemented
yet")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """``await work(item)`` for every item, at most ``limit`` calls in flight at once; the results
    in the items' order. The first call to fail cancels the others and its exception is raised;
    ``deadline_s`` (seconds, over the whole fan-out) passing cancels them all and raises
    TimeoutError. Nothing it started outlives it. ValueError when ``limit`` is below 1."""
    raise NotImplementedError

"""A worker per item: every call starts at once, as a gather over all the items would, and
10,000 items are 10,000 requests queued on the server together."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from exercises.bounded_fan_out.wrong._base import R, T, check_limit, in_order, start_workers, supervise

__all__ = ["fan_out"]


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """Wrong: ``limit`` is checked, then ignored."""
    check_limit(limit)
    results: dict[int, R] = {}
    await supervise(start_workers(items, work, results, len(items)), deadline_s)
    return in_order(results, len(items))

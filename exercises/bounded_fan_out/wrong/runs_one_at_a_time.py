"""One worker whatever the limit: right results, cancellation and deadline, but the calls run in
sequence, and 10,000 of them take 10,000 round trips."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from exercises.bounded_fan_out.wrong._base import R, T, check_limit, in_order, start_workers, supervise

__all__ = ["fan_out"]


async def fan_out(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], *, limit: int, deadline_s: float | None = None
) -> list[R]:
    """Wrong: one call in flight at a time."""
    check_limit(limit)
    results: dict[int, R] = {}
    await supervise(start_workers(items, work, results, min(1, len(items))), deadline_s)
    return in_order(results, len(items))

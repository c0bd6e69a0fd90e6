"""Ownership of background tasks: whoever starts a worker can cancel it and wait it out."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class Workers:
    """A set of long-running tasks that ``stop`` cancels and awaits, leaking none.

    Unlike ``asyncio.TaskGroup``, a worker that crashes is logged and does not cancel its
    siblings: the releaser dying must not take other workers down with it.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, coroutine: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run ``coroutine`` as a task named ``name``, owned by this set."""
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("worker_crashed", worker=task.get_name(), error=repr(task.exception()))

    def __len__(self) -> int:
        return len(self._tasks)

    async def stop(self) -> None:
        """Cancel every worker and wait until all have ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

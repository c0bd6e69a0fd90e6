"""A wake-up signal between tasks of one process: "something changed, look again".

A waiter notes ``generation`` before it reads the database and passes it to ``wait``; a change
that lands between the read and the wait then returns at once instead of being missed. Waiters
still re-read the database after waking, so a spurious wake-up only costs a query.
"""

from __future__ import annotations

import asyncio
import contextlib


class Notifier:
    """A wake-up signal: ``notify`` bumps ``generation`` and wakes every task in ``wait``."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.generation = 0

    def notify(self) -> None:
        """Wake every current waiter."""
        self.generation += 1
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, seen: int, timeout: float) -> None:
        """Return once ``generation`` has moved past ``seen``, or after ``timeout`` seconds."""
        if self.generation != seen:
            return
        event = self._event
        # asyncio.timeout, not wait_for, which on Python 3.11 can swallow a cancel that arrives
        # as the event is set.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()

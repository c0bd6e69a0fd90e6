"""A wake-up signal between tasks of one process: "something changed, look again".

Waiters still re-read the database after waking, so a lost or spurious wake-up only costs
latency; it never decides an outcome.
"""

from __future__ import annotations

import asyncio
import contextlib


class Notifier:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        """Wake every current waiter."""
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        """Return on the next notify, or after ``timeout`` seconds, whichever is first."""
        event = self._event
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

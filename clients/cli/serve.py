"""``gpucloud serve``: run a control plane until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from services.heap import tune_collector
from services.log_config import LogFormat, LogLevel, configure
from services.server import ControlPlane, ServerConfig


async def serve(config: ServerConfig, *, log_level: LogLevel, log_format: LogFormat) -> None:
    """Run a control plane until the first SIGINT or SIGTERM, then drain and stop it; a second signal stops the
    process at once. Says where the operator token is once serving. A failed start raises: StartError, or
    InputError for a bad rate card."""
    configure(log_level, log_format)
    plane = ControlPlane(config)
    stop = asyncio.Event()
    # Before the start: a SIGTERM that arrives as soon as the port is bound must still drain.
    with _stopping_on_signals(stop):
        await plane.start()  # a failed start has closed what it opened
        try:
            tune_collector()
            announce_operator_token(plane.operator_token_created, plane.operator_token_path)
            await stop.wait()
        finally:
            await plane.stop()


@contextlib.contextmanager
def _stopping_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """The first SIGINT or SIGTERM inside the block sets ``stop`` (a graceful stop); a second
    one ends the process at once (``_exit_at_once``), even while the drain or a start hangs.

    Plain ``signal`` handlers rather than the loop's: they run in the main thread as soon as it
    runs Python, so a loop stuck in a callback still sees the second signal, and one handler
    counting both signals leaves no moment in which neither is installed.
    """
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    received = 0

    def on_signal(signum: int, frame: object) -> None:
        nonlocal received
        received += 1
        if received > 1:
            _exit_at_once(signum)
        loop.call_soon_threadsafe(stop.set)

    previous = {sig: signal.signal(sig, on_signal) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _exit_at_once(signum: int) -> None:
    """Stop without draining, as a crash would: nothing unacknowledged was promised, and what
    was acknowledged is already durable."""
    os.write(2, b"error: interrupted again; stopped without draining\n")
    os._exit(128 + signum)


def announce_operator_token(created: Path | None, path: Path) -> None:
    """Tell the user where the operator token is: just written, written before, or none here."""
    from clients.cli.render import errors

    if created is not None:
        errors.print(
            f"[bold]First start:[/bold] created an operator token in [bold]{created}[/bold] (mode 0600).\n"
            f"  export GPUCLOUD_TOKEN=$(cat {created})"
        )
    elif path.exists():
        errors.print(f"operator token: {path}")
    else:
        # A replica of a database another control plane bootstrapped, or a token file moved away.
        errors.print(
            "operator token: none in this data directory; the database already has operators (the first"
            " token was written into the data directory of the control plane that first started on it)"
        )

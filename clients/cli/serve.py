"""``gpucloud serve``: run a control plane until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

from services.heap import freeze_startup_heap
from services.log_config import LogFormat, LogLevel, configure
from services.server import ControlPlane, ServerConfig


async def serve(config: ServerConfig, *, log_level: LogLevel, log_format: LogFormat) -> None:
    configure(log_level, log_format)
    plane = ControlPlane(config)
    stop = asyncio.Event()
    # Before the start: a SIGTERM that arrives as soon as the port is bound must still drain.
    with _stopping_on_signals(stop):
        await plane.start()  # a failed start has closed what it opened
        try:
            freeze_startup_heap()
            _announce_token(plane.operator_token_created, plane.operator_token_path)
            await stop.wait()
        finally:
            await plane.stop()


@contextlib.contextmanager
def _stopping_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """The first SIGINT or SIGTERM inside the block sets ``stop`` (a graceful stop); after it
    the signals have their default effect again, so a second one ends a start or a drain that
    hangs."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)

    def restore() -> None:
        for sig in signals:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)

    def first_signal() -> None:
        stop.set()
        restore()

    for sig in signals:
        loop.add_signal_handler(sig, first_signal)
    try:
        yield
    finally:
        restore()


def _announce_token(created: Path | None, path: Path) -> None:
    from clients.cli.render import errors

    if created is not None:
        errors.print(
            f"[bold]First start:[/bold] created an operator token in [bold]{created}[/bold] (mode 0600).\n"
            f"  export GPUCLOUD_TOKEN=$(cat {created})"
        )
    else:
        errors.print(f"operator token: {path} (if this data directory created it)")

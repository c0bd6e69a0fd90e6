"""``gpucloud serve``: run a control plane until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

from services.log_config import LogFormat, LogLevel, configure
from services.server import ControlPlane, ServerConfig


async def serve(config: ServerConfig, *, log_level: LogLevel, log_format: LogFormat) -> None:
    configure(log_level, log_format)
    plane = ControlPlane(config)
    await plane.start()
    _announce_token(plane.operator_token_created, plane.operator_token_path)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        await plane.stop()


def _announce_token(created: Path | None, path: Path) -> None:
    from clients.cli.render import errors

    if created is not None:
        errors.print(
            f"[bold]First start:[/bold] created an operator token in [bold]{created}[/bold] (mode 0600).\n"
            f"  export GPUCLOUD_TOKEN=$(cat {created})"
        )
    else:
        errors.print(f"operator token: {path} (if this data directory created it)")

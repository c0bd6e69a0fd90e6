"""Entry point of the ``gpucloud`` command."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated

import typer

from clients.cli import verbs
from clients.cli.context import DEFAULT_ADDR, Connection, token_from

app = typer.Typer(
    help="gpucloud: the control plane of a GPU cloud, and a client for it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(verbs.tenants, name="tenants")
app.add_typer(verbs.nodes, name="nodes")
app.add_typer(verbs.allocations, name="allocations")
app.add_typer(verbs.operations, name="operations")


@app.callback()
def connect(
    ctx: typer.Context,
    addr: Annotated[str, typer.Option(envvar="GPUCLOUD_ADDR", help="Control plane address.")] = DEFAULT_ADDR,
    token: Annotated[str | None, typer.Option(envvar="GPUCLOUD_TOKEN", help="Bearer token.")] = None,
    token_file: Annotated[Path | None, typer.Option(help="Read the bearer token from this file.")] = None,
) -> None:
    """Connection settings for the client verbs."""
    ctx.obj = Connection(addr, token_from(token, token_file))


@app.command()
def serve(
    data_dir: Annotated[Path, typer.Option(help="SQLite database, operator token.")] = Path("./data"),
    listen: Annotated[str, typer.Option(help="host:port to serve gRPC on.")] = DEFAULT_ADDR,
    database_url: Annotated[
        str | None,
        typer.Option(envvar="GPUCLOUD_DATABASE_URL", help="postgresql+asyncpg://... (default: SQLite in data dir)"),
    ] = None,
    scrub_seconds: Annotated[float, typer.Option(help="Simulated scrub time of a released node.")] = 1.0,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
    log_format: Annotated[str, typer.Option(help="auto, json or console.")] = "auto",
) -> None:
    """Run a control plane until interrupted."""
    from clients.cli.serve import serve as run_server
    from services.server import ServerConfig

    config = ServerConfig(data_dir=data_dir, listen=listen, database_url=database_url, scrub_seconds=scrub_seconds)
    asyncio.run(run_server(config, log_level=log_level, log_format=log_format))


@app.command()
def demo(
    data_dir: Annotated[Path | None, typer.Option(help="Keep the demo's data here instead of a temp dir.")] = None,
) -> None:
    """Start an embedded control plane and walk through allocate, list, cancel, release."""
    from clients.cli.demo import run_demo

    asyncio.run(run_demo(data_dir))


def main() -> None:
    # Rich wraps tables to the terminal; under CI with no terminal give it room to be readable.
    os.environ.setdefault("COLUMNS", "160") if not os.isatty(1) else None
    app()

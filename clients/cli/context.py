"""Connection settings shared by every client verb, and the error handling around a call."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import typer

from clients.async_client import AsyncClient
from clients.cli import render
from clients.errors import GpucloudError

T = TypeVar("T")

DEFAULT_ADDR = "127.0.0.1:50051"


@dataclass
class Connection:
    """Where the client verbs connect and with which credential."""

    address: str
    token: str | None
    # Read only when a verb needs it, so that a bad path does not break ``serve`` or ``demo``.
    token_file: Path | None = None

    def credential(self) -> str | None:
        """The bearer token: the one given, else the token file's. Raises TokenFileError."""
        if self.token:
            return self.token
        if self.token_file is None:
            return None
        try:
            return self.token_file.read_text().strip() or None
        except (OSError, UnicodeDecodeError) as error:
            raise TokenFileError(
                f"--token-file {self.token_file}: {getattr(error, 'strerror', None) or error}"
            ) from None


class TokenFileError(Exception):
    """The token file cannot be read."""


def connection(ctx: typer.Context) -> Connection:
    """The ``Connection`` the root callback stored on the context."""
    obj = ctx.find_root().obj
    assert isinstance(obj, Connection)
    return obj


def call(ctx: typer.Context, action: Callable[[AsyncClient], Awaitable[T]]) -> T:
    """Run one client action; turn API errors into a readable message and exit code 1 (a
    missing or unreadable token, and a bad value given on the command line, exit 2)."""
    conn = connection(ctx)
    try:
        credential = conn.credential()
    except TokenFileError as error:
        render.errors.print(f"[red]error[/red]: {error}", highlight=False)
        raise typer.Exit(2) from None
    if not credential:
        render.errors.print("[red]error[/red]: no token; pass --token, --token-file or set GPUCLOUD_TOKEN")
        raise typer.Exit(2)
    if not (credential.isascii() and credential.isprintable()) or " " in credential:
        # gRPC refuses such metadata with a traceback of its own.
        render.errors.print(
            "[red]error[/red]: the token holds characters no bearer token has (only printable ASCII, no"
            " spaces); check --token, --token-file or GPUCLOUD_TOKEN",
            highlight=False,
        )
        raise typer.Exit(2)
    if not conn.address or "://" in conn.address:
        render.errors.print(
            f"[red]error[/red]: --addr {conn.address!r}: give host:port (e.g. {DEFAULT_ADDR}), not a URL or nothing",
            highlight=False,
        )
        raise typer.Exit(2)
    token = credential

    async def run() -> T:
        async with AsyncClient(conn.address, token) as client:
            return await action(client)

    try:
        return asyncio.run(run())
    except GpucloudError as err:
        render.error(err, address=conn.address)
        raise typer.Exit(1) from None
    except ValueError as err:
        render.errors.print(f"[red]error[/red]: {err}", highlight=False)
        raise typer.Exit(2) from None

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
    address: str
    token: str | None


def connection(ctx: typer.Context) -> Connection:
    obj = ctx.find_root().obj
    assert isinstance(obj, Connection)
    return obj


def token_from(token: str | None, token_file: Path | None) -> str | None:
    if token:
        return token
    if token_file is not None:
        return token_file.read_text().strip()
    return None


def call(ctx: typer.Context, action: Callable[[AsyncClient], Awaitable[T]]) -> T:
    """Run one client action; turn API errors into a readable message and exit code 1."""
    conn = connection(ctx)
    if not conn.token:
        render.errors.print("[red]error[/red]: no token; pass --token, --token-file or set GPUCLOUD_TOKEN")
        raise typer.Exit(2)
    token = conn.token

    async def run() -> T:
        async with AsyncClient(conn.address, token) as client:
            return await action(client)

    try:
        return asyncio.run(run())
    except GpucloudError as err:
        render.error(err)
        raise typer.Exit(1) from None
    except ValueError as err:
        render.errors.print(f"[red]error[/red]: {err}", highlight=False)
        raise typer.Exit(2) from None

"""Connection settings shared by every client verb, the error handling around a call, and the
exit codes: 1 for an error, 2 for a usage error (with the option checks made before any call), 3
for an operation not done within the wait."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TypeVar

import grpc
import typer
from rich.table import Table
from rich.text import Text

from clients import models
from clients.async_client import AsyncClient, RetryPolicy
from clients.cli import render
from clients.errors import GpucloudError, InvalidValueError

T = TypeVar("T")

DEFAULT_ADDR = "127.0.0.1:50051"


def int32(text: str) -> int:
    """Parse an integer option the API can carry: its counts and indexes are int32, and a
    larger number cannot even be put into a request. A parser rather than ``max=``, which would
    print ``x<=2147483647`` in ``--help`` as if it were the limit: the server's own limits
    (1-256 nodes, GPU index 0-7, ...) are in its answer, naming the field."""
    try:
        number = int(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not an integer") from None
    if not -(2**31) <= number < 2**31:
        raise typer.BadParameter(f"{number} is out of range: the API carries 32-bit integers")
    return number


# A person waits for the command: it fails fast when the server stays unreachable or keeps
# answering UNAVAILABLE (6 tries, at most about 1.5 s of back-off in all), rather than
# retrying until the 30 s deadline as the library's default policy does for programs.
CLI_RETRY = RetryPolicy(attempts=6, initial_backoff=0.05, max_backoff=1.0)
# Where a parameter's value came from when the user typed it (click's ParameterSource names).
_TYPED_SOURCES = frozenset({"COMMANDLINE", "ENVIRONMENT"})

# API fields whose command-line parameter has another name, with every name it has in some
# command (the first the command has wins). Any other field is looked up by its own name among
# the command's parameters (``gpu_model`` is ``--gpu-model``).
_PARAMETERS_OF_FIELD: dict[str, tuple[str, ...]] = {
    "node_count": ("nodes_",),
    "gpus": ("gpu_uuid",),
    "tenant_id": ("tenant",),
    "node_ids": ("node",),
    "gpu_indexes": ("gpu",),
    # ``metrics query --field NAME``; ``metrics write --set NAME=NUMBER`` (fields['power_w']).
    "fields": ("field", "set_"),
    "start_time": ("start",),
    "end_time": ("end",),
    "start_ms": ("start",),
    "end_ms": ("end",),
    "step_ms": ("step",),
    "aggregation": ("agg",),
    "gpu_index": ("gpu",),
    "timestamp_ms": ("at",),
}
_PATH_SEGMENT = re.compile(r"[A-Za-z_]+")


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
            token = self.token_file.read_text().strip()
        except (OSError, UnicodeDecodeError) as error:
            raise TokenFileError(
                f"--token-file {self.token_file}: {getattr(error, 'strerror', None) or error}"
            ) from None
        if not token:
            raise TokenFileError(f"--token-file {self.token_file}: is empty")
        return token


class TokenFileError(Exception):
    """The token file cannot be read."""


def connection(ctx: typer.Context) -> Connection:
    """The ``Connection`` the root callback stored on the context."""
    obj = ctx.find_root().obj
    assert isinstance(obj, Connection)
    return obj


def is_address(address: str) -> bool:
    """Whether ``address`` is ``host:port`` (port 1-65535; ``[::1]:50051`` too) or a ``unix:``
    socket path: gRPC would take a host alone as port 443, a URL as a host name, and an IPv6
    address out of brackets (``::1:50051``) or a host with spaces to a resolver error later."""
    if address.startswith("unix:"):
        return len(address) > len("unix:")
    host, _, port = address.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    return (
        bool(host)
        and "://" not in address
        and not any(c.isspace() for c in address)
        and (bracketed or ":" not in host)
        and port.isdigit()
        and 1 <= int(port) <= 65535
    )


EXIT_ERROR = 1
EXIT_USAGE = 2
# An operation waited for did not finish within the wait (``operations wait``, ``cancel --wait``).
EXIT_NOT_DONE = 3
# What the server's validation says of a field that must have a value (services/validation.py).
REQUIRED = "is required"


def call(ctx: typer.Context, action: Callable[[AsyncClient], Awaitable[T]]) -> T:
    """Run one client action; turn API errors into a readable message and exit code 1.

    A bad value given on the command line exits 2, as click's own usage errors do: refused by
    the client before calling, or by the server (INVALID_ARGUMENT naming a field that an option
    or argument of this command set); so does a missing or unreadable token."""
    conn = connection(ctx)
    try:
        credential = conn.credential()
    except TokenFileError as error:
        render.fail(str(error))
        raise typer.Exit(EXIT_USAGE) from None
    if not credential:
        render.fail("no token; pass --token, --token-file or set GPUCLOUD_TOKEN")
        raise typer.Exit(EXIT_USAGE)
    if not (credential.isascii() and credential.isprintable()) or " " in credential:
        # gRPC refuses such metadata with a traceback of its own.
        render.fail(
            "the token holds characters no bearer token has (only printable ASCII, no spaces);"
            " check --token, --token-file or GPUCLOUD_TOKEN"
        )
        raise typer.Exit(EXIT_USAGE)
    if not is_address(conn.address):
        render.fail(
            f"--addr {conn.address!r}: give host:port (e.g. {DEFAULT_ADDR}, or [::1]:50051 for IPv6),"
            " not a URL or a host alone"
        )
        raise typer.Exit(EXIT_USAGE)
    token = credential

    async def run() -> T:
        async with AsyncClient(conn.address, token, retry=CLI_RETRY) as client:
            return await action(client)

    try:
        return asyncio.run(run())
    except GpucloudError as err:
        labels = option_labels(ctx, err.field_violations)
        render.error(err, address=conn.address, labels=labels)
        missing = {path for path, why in err.field_violations.items() if why == REQUIRED}
        raise typer.Exit(exit_code(err, typed_labels(ctx, labels, missing=missing))) from None
    except ValueError as err:
        render.fail(value_error_line(ctx, err))
        raise typer.Exit(EXIT_USAGE) from None


def call_noting(ctx: typer.Context, action: Callable[[AsyncClient], Awaitable[T]], note: Callable[[], str | None]) -> T:
    """``call``, and when it fails, the line ``note`` gives (if any) under the error: what of the
    action stands although it failed, read once the error is known."""
    try:
        return call(ctx, action)
    except typer.Exit:
        line = note()
        if line is not None:
            render.errors.print(Text(line), soft_wrap=True)
        raise


def call_and_show(
    ctx: typer.Context,
    action: Callable[[AsyncClient], Awaitable[T]],
    json_out: bool,
    as_table: Callable[[Sequence[T], str], Table],
    title: str,
) -> None:
    """``call``, then print the one resource it answers: as JSON, or in ``as_table`` under ``title``."""
    item = call(ctx, action)
    render.show_one(item, json_out, as_table([item], title))


def exit_code(err: GpucloudError, typed: Mapping[str, str]) -> int:
    """2 when the server refused a value of the command line (INVALID_ARGUMENT with a bad
    field that ``typed`` maps to an option or argument given on the command line or in the
    environment, or to one left out that the call needed: ``typed_labels``), else 1: a field no
    option sets was filled in by the client, and one an option filled in by default
    (``metrics write`` without ``--time`` sends the time now) was not the user's, so neither is
    a usage error."""
    if err.code is grpc.StatusCode.INVALID_ARGUMENT and typed:
        return EXIT_USAGE
    return EXIT_ERROR


def typed_labels(ctx: typer.Context, labels: Mapping[str, str], *, missing: Iterable[str] = ()) -> dict[str, str]:
    """The ``labels`` (``option_labels``) whose option or argument the user gave, on the command
    line or through its environment variable, or left out where the server requires a value
    (``missing``: an operator's ``allocations create`` without ``--tenant``; a missing option is
    a usage error too); those whose default put a value in (a time of now) are left out."""
    required = set(missing)
    typed = {}
    for path, name in _parameter_names(ctx, labels).items():
        source = ctx.get_parameter_source(name)
        given = source is not None and source.name in _TYPED_SOURCES
        if given or (path in required and ctx.params.get(name) in ("", None)):
            typed[path] = labels[path]
    return typed


def value_error_line(ctx: typer.Context, error: ValueError) -> str:
    """A value the client refused before calling, prefixed with the option that gave it when
    the client named the request field (``--gpu-model: unknown GPU model 'h999'; ...``)."""
    if isinstance(error, InvalidValueError):
        return f"{option_labels(ctx, {error.field: ''}).get(error.field, error.field)}: {error}"
    return str(error)


def option_labels(ctx: typer.Context, fields: Mapping[str, str]) -> dict[str, str]:
    """For each API field path the server named, the option or argument of this command that
    set it (``node_count`` -> ``--nodes``, ``gpus[3].uuid`` -> ``--gpu-uuid``); fields that no
    parameter of the command sets are left out."""
    parameters = {param.name: param for param in ctx.command.params if param.name}
    labels = {}
    for path, name in _parameter_names(ctx, fields).items():
        long_options = [o for o in parameters[name].opts if o.startswith("--")]
        labels[path] = long_options[0] if long_options else name.upper()
    return labels


def _parameter_names(ctx: typer.Context, fields: Iterable[str]) -> dict[str, str]:
    """For each API field path, the name of the command's parameter that sets it: the first
    segment of the path that names one wins; paths that none sets are left out."""
    names = {param.name for param in ctx.command.params if param.name}
    found = {}
    for path in fields:
        for segment in _PATH_SEGMENT.findall(path):
            name = next((n for n in (*_PARAMETERS_OF_FIELD.get(segment, ()), segment) if n in names), None)
            if name is not None:
                found[path] = name
                break
    return found


def refuse_unwritable_path(option: str, path: Path) -> None:
    """Exit 2 before any call when ``path`` cannot be the file an option names: a directory, or
    a file in a directory that does not exist (which is not made: a mistyped path must not
    leave directories behind). Known before a long export or query runs, not after it."""
    problem = None
    if path.is_dir():
        problem = "is a directory; name the file to write"
    elif not path.parent.is_dir():
        problem = f"{path.parent} is not a directory" if path.parent.exists() else f"no directory {path.parent}"
    if problem is not None:
        render.fail(f"{option} {path}: {problem}")
        raise typer.Exit(EXIT_USAGE)


def check_wait_timeout(timeout: float) -> None:
    """Exit 2 unless ``--timeout`` is a finite number of seconds, 0 or more: the option's ``min=0``
    lets inf through (and nan, in some typer versions). Checked before the command does anything:
    a cancel carried out stands, whatever the wait then says."""
    if not (math.isfinite(timeout) and timeout >= 0):
        render.fail(f"--timeout {timeout}: must be a finite number of seconds, 0 or more")
        raise typer.Exit(EXIT_USAGE)


def exit_not_done(operation: models.Operation, timeout: float) -> NoReturn:
    """Exit 3, saying why on stderr (the output above is the operation as it stands)."""
    render.errors.print(
        Text(f"not done after {timeout:g} s; wait again with: gpucloud operations wait {operation.name}"),
        soft_wrap=True,
    )
    raise typer.Exit(EXIT_NOT_DONE)

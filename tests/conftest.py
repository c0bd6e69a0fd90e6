"""Shared fixtures: a real database (SQLite file, or a fresh PostgreSQL database), a real
control plane on a loopback port, and real clients.

Set GPUCLOUD_TEST_DATABASE_URL to a PostgreSQL server URL (postgresql+asyncpg://user@host/db)
to run every database-backed test against PostgreSQL: each test then creates a database of its
own (a copy of one migrated at the start of the session) and drops it afterwards, never
trusting what an earlier run left on the server. The tests that use no database are left out
of that run: they ran, the same, without it.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import secrets
import shutil
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import pytest
from sqlalchemy.engine import make_url

from clients import AsyncClient
from services.server import ControlPlane, ServerConfig
from services.store.engine import Database
from tests.clients.scripted_server import Behaviour, Start, serve

PG_ENV = "GPUCLOUD_TEST_DATABASE_URL"


def backend() -> str:
    return "postgresql" if os.environ.get(PG_ENV) else "sqlite"


# A test that uses a database asks, through whatever fixtures, for one of these.
DATABASE_FIXTURES = frozenset({"schema_template", "fresh_database_url"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On the PostgreSQL pass, only the tests that use a database run: the others (the metrics
    store, the accounting engine, the client's and the CLI's own logic, the docs) would run
    again exactly as they did in the SQLite pass, at a quarter of .ci/run's time."""
    if not os.environ.get(PG_ENV):
        return
    keep = [item for item in items if DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep


@pytest.fixture(scope="session")
def schema_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database migrated to the schema's head once per session, for tests to start from a
    copy of: migrating takes 0.1 s on SQLite and 0.25 s on PostgreSQL, copying a tenth of that.
    On SQLite the path of a closed database file; on PostgreSQL the name of a database."""
    admin_url = os.environ.get(PG_ENV)
    if not admin_url:
        path = tmp_path_factory.mktemp("schema") / "head.db"
        asyncio.run(_migrate(f"sqlite+aiosqlite:///{path}"))
        yield str(path)
        return
    name = f"gpucloud_template_{secrets.token_hex(6)}"
    asyncio.run(_admin(admin_url, f'CREATE DATABASE "{name}"'))
    try:
        asyncio.run(_migrate(make_url(admin_url).set(database=name).render_as_string(hide_password=False)))
        yield name
    finally:
        asyncio.run(_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _migrate(url: str) -> None:
    await (await Database.open(url)).close()


async def _admin(admin_url: str, statement: str) -> None:
    dsn = make_url(admin_url).set(drivername="postgresql").render_as_string(hide_password=False)
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(statement)
    finally:
        await admin.close()


@asynccontextmanager
async def own_database(path: Path, template: str | None) -> AsyncIterator[str]:
    """The URL of a database for one test, dropped afterwards: a copy of ``template``, or empty
    when None. On SQLite the database is the file ``path``; on PostgreSQL a new database."""
    admin_url = os.environ.get(PG_ENV)
    if not admin_url:
        if template is not None:
            shutil.copyfile(template, path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    name = f"gpucloud_test_{secrets.token_hex(6)}"
    await _admin(admin_url, f'CREATE DATABASE "{name}"' + ("" if template is None else f' TEMPLATE "{template}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        await _admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def database_url(tmp_path: Path, schema_template: str) -> AsyncIterator[str]:
    """A URL of a database for this test only, its schema at the head and no rows in it."""
    async with own_database(tmp_path / "test.db", schema_template) as url:
        yield url


@pytest.fixture
async def fresh_database_url(tmp_path: Path) -> AsyncIterator[str]:
    """A URL of an empty database (no schema at all) for this test only: for tests of migrating."""
    async with own_database(tmp_path / "test.db", None) as url:
        yield url


@asynccontextmanager
async def open_database(database_url: str) -> AsyncIterator[Database]:
    """A store on ``database_url`` (schema migrated to the head), closed on the way out: another
    replica's, when a test already has ``store`` on the same database."""
    opened = await Database.open(database_url)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Database]:
    """The store on an empty database of this test's own, schema migrated to the head."""
    async with open_database(database_url) as opened:
        yield opened


@dataclass
class RunningControlPlane:
    """A started control plane and the operator credential it minted."""

    plane: ControlPlane
    config: ServerConfig
    operator_token: str

    @property
    def address(self) -> str:
        return self.plane.address

    def client(self, token: str | None = None) -> AsyncClient:
        return AsyncClient(self.address, token or self.operator_token, timeout=15)


async def start_control_plane(
    data_dir: Path, database_url: str, *, operator_token: str | None = None, **overrides: object
) -> RunningControlPlane:
    """Start a control plane. ``operator_token``: for a replica of a database another plane
    has bootstrapped, which mints no token of its own; by default the one in ``data_dir``."""
    config = ServerConfig(data_dir=data_dir, listen="127.0.0.1:0", database_url=database_url, scrub_seconds=0.05)
    for key, value in overrides.items():
        object.__setattr__(config, key, value)
    plane = ControlPlane(config)
    await plane.start()
    try:
        token = operator_token or plane.operator_token_path.read_text().strip()
    except BaseException:
        await plane.stop()
        raise
    return RunningControlPlane(plane, config, token)


@asynccontextmanager
async def running_control_plane(
    data_dir: Path, database_url: str, *, operator_token: str | None = None, **overrides: object
) -> AsyncIterator[RunningControlPlane]:
    """A started control plane, stopped on exit whatever happens."""
    running = await start_control_plane(data_dir, database_url, operator_token=operator_token, **overrides)
    try:
        yield running
    finally:
        await running.plane.stop()


@pytest.fixture
async def control_plane(tmp_path: Path, database_url: str) -> AsyncIterator[RunningControlPlane]:
    async with running_control_plane(tmp_path / "data", database_url) as running:
        yield running


@pytest.fixture
async def operator(control_plane: RunningControlPlane) -> AsyncIterator[AsyncClient]:
    async with control_plane.client() as client:
        yield client


def gpu_uuids(node_id: str) -> list[str]:
    return [f"GPU-{node_id}-{i:02d}" for i in range(8)]


async def register_ready_nodes(
    client: AsyncClient, count: int, *, gpu_model: str = "H100", prefix: str = "node", zone: str = "zone-a"
) -> list[str]:
    """Register ``count`` nodes and pass their burn-in; return their ids."""
    ids = []
    for i in range(count):
        node_id = f"{prefix}-{i:03d}"
        await client.register_node(
            node_id,
            gpu_model=gpu_model,
            gpu_uuids=gpu_uuids(node_id),
            zone=zone,
            rack=f"rack-{i // 4}",
            leaf_switch=f"leaf-{i // 8}",
        )
        await client.complete_burn_in(node_id)
        ids.append(node_id)
    return ids


def free_port() -> int:
    """A loopback port nobody listens on right now (the OS's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def gpucloud_command() -> list[str]:
    """How to run the ``gpucloud`` command as its own process, installed script or not."""
    script = Path(sys.executable).parent / "gpucloud"
    return [str(script)] if script.exists() else [sys.executable, "-c", "from clients.cli.app import main; main()"]


@pytest.fixture
async def scripted() -> AsyncIterator[Start]:
    """Starts scripted gRPC servers (tests/clients/scripted_server.py) and stops them after the test;
    ``await scripted(methods)`` is the new server's address."""
    servers: list[grpc.aio.Server] = []

    async def start(methods: dict[str, Behaviour]) -> str:
        server, port = await serve(methods)
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        await server.stop(None)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The process umask set to most systems' 022, which leaves new files readable by everyone;
    the umask before is restored after the test."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


async def until(condition: Callable[[], bool | Awaitable[bool]], *, timeout: float = 10.0) -> None:
    """Return once ``condition()`` holds, checking every few milliseconds; fail the test if it
    does not hold within ``timeout`` seconds. ``condition`` may be a coroutine function (a
    check over the API), awaited at each check."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + timeout

    async def holds() -> bool:
        answer = condition()
        return await answer if inspect.isawaitable(answer) else answer

    while not await holds():
        assert loop.time() < give_up, f"still not true after {timeout} s: {condition}"
        await asyncio.sleep(0.005)

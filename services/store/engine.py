"""Database engines and transactions for SQLite (embedded default) and PostgreSQL.

SQLite needs care: pysqlite emits no BEGIN before a SELECT, so a read-then-write loses
updates unless the transaction starts with ``BEGIN IMMEDIATE``.
Writes therefore go through their own single-connection engine that begins every transaction
IMMEDIATE (taking the write lock up front, so writers queue in-process instead of failing with
"database is locked"); reads use a separate pool with plain deferred transactions, which WAL
lets run beside the writer. On PostgreSQL one pool serves both; writes run at READ COMMITTED,
where row locks (``FOR UPDATE SKIP LOCKED``) plus unique constraints settle races, and reads
at REPEATABLE READ, read-only, so that a read sees one snapshot on both databases.

Every write transaction of the control plane is SQL steps (store/tx.py) run by ``transact``:
on SQLite by the writer (store/writer.py), which commits them in groups; on PostgreSQL on a
pooled asyncpg connection, one asyncpg transaction each. Every read is SQL steps run by
``query`` in one read-only snapshot: on SQLite whole on a reader thread (store/readers.py), on
PostgreSQL in a session of the shared pool. ``read()`` and ``write()`` hand out SQLAlchemy sessions
for what is not a repository (tests and tools that set up or inspect rows). On SQLite the
writer and ``write()`` share an asyncio lock held for the whole transaction, so the process's
two write connections take turns in order instead of polling each other through the busy
handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import structlog
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.pool import NullPool
from sqlmodel.ext.asyncio.session import AsyncSession

from services.store import sqlite_driver
from services.store.migrations import upgrade_to_head
from services.store.readers import SqliteReaders
from services.store.tx import Tx, run_in_session, run_on_asyncpg
from services.store.writer import SqliteWriter

log = structlog.get_logger(__name__)

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 10_000
# Arbitrary, fixed: the PostgreSQL advisory lock that serializes schema migrations.
MIGRATION_LOCK_ID = 0x67707563  # 'gpuc'


# The default database's file in the data directory.
DATABASE_FILE = "gpucloud.db"


def sqlite_url(data_dir: Path) -> str:
    """The default database: a SQLite file in the data directory."""
    return f"sqlite+aiosqlite:///{data_dir / DATABASE_FILE}"


# The async drivers the store runs on, by backend.
SUPPORTED_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}
URL_FORMS = "sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST:PORT/DATABASE"


class UnsupportedDatabaseUrl(ValueError):
    """A database URL the store cannot run on; the message says what to use instead."""


def check_database_url(url: str) -> URL:
    """``url`` parsed, if it names a database the store runs on: a SQLite file or PostgreSQL,
    through their async drivers. Anything else raises UnsupportedDatabaseUrl before a
    connection is tried (SQLAlchemy would fail later, with an import error of a driver)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UnsupportedDatabaseUrl(f"not a database URL; use {URL_FORMS}") from None
    backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise UnsupportedDatabaseUrl("in-memory SQLite shares one connection between tasks; use a file")
    if SUPPORTED_DRIVERS.get(backend) != driver:
        raise UnsupportedDatabaseUrl(f"{parsed.drivername!r} is not supported; use {URL_FORMS}")
    return parsed


def _configure_sqlite(engine: AsyncEngine, *, immediate: bool) -> None:
    # WAL, foreign keys, synchronous=FULL and the busy timeout are set by the driver when it
    # opens each connection (store/sqlite_driver.py); here only when transactions begin.
    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


class Database:
    """The control plane's database: write transactions (``transact``) and read snapshots
    (``query``) of SQL steps over one schema.

    Its engines hide statement parameters from the errors they raise: those errors are logged
    and shown at start, and the parameters hold the page-token signing key, token digests and
    callers' values."""

    def __init__(
        self,
        url: str,
        write_engine: AsyncEngine,
        read_engine: AsyncEngine,
        writer: SqliteWriter | None = None,
        write_lock: asyncio.Lock | None = None,
        readers: SqliteReaders | None = None,
    ) -> None:
        self.url = url
        self._writer = writer
        # SQLite only: ``query`` runs there, whole, in one hop; ``read`` sessions use the engine.
        self._readers = readers
        # SQLite only: shared with the writer, so its two write connections take turns.
        self._write_lock = write_lock
        self._write_engine = write_engine
        # Read on every create and cancel; through AsyncEngine it is two property lookups.
        self._dialect: str = write_engine.dialect.name
        self._read_engine = read_engine
        self._writes = async_sessionmaker(write_engine, class_=AsyncSession, expire_on_commit=False)
        # Transactions ending on tasks of their own (see transact and write); close waits for them.
        self._in_flight: set[asyncio.Task[Any]] = set()
        # Write transactions committed through ``transact`` since the store was opened: what a
        # workload costs the database, for operators and benchmarks.
        self.committed = 0
        self._reads = async_sessionmaker(read_engine, class_=AsyncSession, expire_on_commit=False)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._dialect

    @classmethod
    async def open(cls, url: str) -> Database:
        """Connect, and create or upgrade the schema to the newest migration."""
        parsed = check_database_url(url)
        if parsed.get_backend_name() == "sqlite":
            assert parsed.database is not None  # checked: a file
            # The only connection that may create the file; every later one refuses a missing file.
            await asyncio.to_thread(sqlite_driver.prepare_file, parsed.database, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
            # One writer connection: SQLite has one write lock anyway, and queueing on the pool
            # is cheaper and fairer than spinning on busy_timeout.
            creator = sqlite_driver.connector(parsed.database, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
            write_engine = create_async_engine(
                url, async_creator=creator, pool_size=1, max_overflow=0, pool_timeout=60, hide_parameters=True
            )
            read_engine = create_async_engine(
                url, async_creator=creator, pool_size=4, max_overflow=4, hide_parameters=True
            )
            _configure_sqlite(write_engine, immediate=True)
            _configure_sqlite(read_engine, immediate=False)
            write_lock: asyncio.Lock | None = asyncio.Lock()
            writer: SqliteWriter | None = SqliteWriter(
                parsed.database, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, lock=write_lock
            )
            readers: SqliteReaders | None = SqliteReaders(parsed.database, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
        else:
            write_engine = create_async_engine(url, pool_size=10, max_overflow=10, hide_parameters=True)
            _replace_closed_connections(write_engine)
            # Same pool; a read is one snapshot, as on SQLite: at PostgreSQL's default READ
            # COMMITTED each statement would see a newer state than the one before it.
            read_engine = write_engine.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            writer, write_lock, readers = None, None, None
        store = cls(url, write_engine, read_engine, writer, write_lock, readers)
        try:
            async with write_engine.begin() as connection:
                if write_engine.dialect.name == "postgresql":
                    # Replicas starting together must not run the same migration twice; the lock
                    # is held until this transaction commits.
                    await connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")
                await connection.run_sync(upgrade_to_head)
            if writer is not None:
                await writer.start()
        except BaseException:
            # A store that cannot serve (a file it may not write, a failed migration) leaves no
            # pool or writer thread behind; the caller needs the error that stopped it, not one
            # from closing.
            try:
                await store.close()
            except Exception as error:
                log.warning("store_open_cleanup_failed", error=repr(error))
            raise
        return store

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A read-write session, committed on success and rolled back on any error: for tests and
        tools that set up rows. The control plane's own writes are ``transact``'s."""
        lock = self._write_lock
        if lock is not None:
            await lock.acquire()
        session = self._writes()
        # The commit or rollback and the connection's return to the pool run on a task of their
        # own: a caller cancelled then (a deadline, a client gone) must not interrupt them, or the
        # pool logs the interrupted reset as an error and drops the connection.
        try:
            await session.begin()
            yield session
        except BaseException:
            try:
                await asyncio.shield(self._end_write(session, lock, commit=False))
            except Exception as error:
                # The caller needs the error that ended its block, not the rollback's.
                log.warning("write_rollback_failed", error=repr(error))
            raise
        await asyncio.shield(self._end_write(session, lock, commit=True))

    def _end_write(self, session: AsyncSession, lock: asyncio.Lock | None, *, commit: bool) -> asyncio.Task[None]:
        async def end() -> None:
            try:
                if commit:
                    await session.commit()
                    if self._writer is not None:
                        # Like the writer's commits: one that went to a deleted or replaced
                        # file is lost, so it must not be acknowledged either.
                        await asyncio.to_thread(self._writer.ensure_same_file)
            finally:
                try:
                    await session.close()
                finally:
                    if lock is not None:
                        lock.release()

        return self._owned(end())

    async def transact(self, make: Callable[[], Tx[T]]) -> T:
        """Run the transaction ``make()`` builds (SQL steps, store/tx.py) and commit it.

        Raises what the transaction raises (nothing of it is kept), or ``tx.Conflict`` when a
        constraint refused a write. ``make`` must build the same transaction each time it is
        called: on SQLite a group that has to be undone runs it again (store/writer.py).
        """
        if self._writer is not None:
            result = await self._writer.run(make)
            self.committed += 1
            return result
        # On its own task, shielded from the caller's cancellation (a deadline, a client gone):
        # cancelled mid-statement, asyncpg can leave the pooled connection inside the
        # transaction (BEGIN sent, its answer unread), and the next transaction on it would be
        # a savepoint whose "commit" commits nothing. As on SQLite, a transaction that has
        # begun commits or fails as a whole, and one whose caller left before it began does
        # not begin at all: a burst of expired deadlines must not leave a backlog to run.
        abandoned = asyncio.Event()
        task = self._owned(self._transact_on_postgresql(make, abandoned))
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            abandoned.set()
            raise
        self.committed += 1
        return result

    async def transact_in_order(self, makes: Sequence[Callable[[], Tx[Any]]]) -> list[object]:
        """Run the transactions ``makes`` build, in order, each seeing what those before it
        committed, and answer each one's result or the exception it raised (each commits or
        fails alone, as with ``transact``). On SQLite they are queued together, so that one
        group commit covers them unless a group was already under way; on PostgreSQL each
        commits before the next begins."""
        if self._writer is not None:
            outcomes: list[object] = await asyncio.gather(
                *(self._writer.submit(make) for make in makes), return_exceptions=True
            )
            self.committed += sum(not isinstance(outcome, BaseException) for outcome in outcomes)
            return outcomes
        outcomes = []
        for make in makes:
            try:
                outcomes.append(await self.transact(make))
            except Exception as error:
                outcomes.append(error)
        return outcomes

    def _owned(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``coroutine`` on a task the store owns: ``settled()`` and ``close()`` wait for it,
        whether or not whoever started it still does."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._in_flight.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._in_flight.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved here: a caller that went away no longer wants it

    async def _transact_on_postgresql(self, make: Callable[[], Tx[T]], abandoned: asyncio.Event) -> T:
        for attempt in range(2):
            async with self._write_engine.connect() as connection:
                if abandoned.is_set():
                    raise asyncio.CancelledError  # its caller left while it waited for a connection
                # The pooled asyncpg connection, in a transaction of asyncpg's own: SQLAlchemy
                # begins its transactions lazily, on its first statement, which never comes here.
                raw = (await connection.get_raw_connection()).driver_connection
                assert raw is not None
                begun = False
                try:
                    async with raw.transaction():
                        begun = True
                        return await run_on_asyncpg(raw, make())
                except BaseException as error:
                    if raw.is_in_transaction() or _begun(raw) or raw.is_closed():
                        # The rollback did not happen (the connection broke, or this task was
                        # cancelled at close): it must not go back to the pool inside a transaction.
                        await connection.invalidate()
                    if not begun and attempt == 0 and _connection_lost(raw, error):
                        # The server closed the connection before the pool knew (the pool does
                        # not ping: see _replace_closed_connections). BEGIN was the first to
                        # find out and nothing ran, so the transaction starts over on a fresh one.
                        log.info("postgresql_connection_replaced", error=repr(error))
                        continue
                    raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """A read-only session over a consistent snapshot (``query`` runs steps in one)."""
        session = self._reads()
        try:
            await session.begin()
            yield session
        finally:
            # Ends the transaction (a rollback: nothing was written) and returns the
            # connection, shielded: a reader cancelled then (a deadline, a client gone) would
            # interrupt the rollback that resets the connection, and SQLAlchemy would log that
            # as an error and throw the connection away.
            await asyncio.shield(session.close())

    async def query(self, step: Tx[T]) -> T:
        """Run the read ``step`` (SQL steps, store/tx.py) in one read-only snapshot and return
        what it returns: how every repository read runs. Steps that must see one snapshot are
        composed into one step with ``yield from``.

        The read runs on a task the store owns, shielded from the caller's cancellation: one
        cancelled while its connection was being opened or handed back (a loop stopped with the
        server) would leave that connection open past ``close``, and SQLite its write-ahead log
        beside the database."""
        return await asyncio.shield(self._owned(self._query(step)))

    async def _query(self, step: Tx[T]) -> T:
        if self._readers is not None:
            return await self._readers.query(step)
        async with self.read() as session:
            return await run_in_session(session, step)

    async def settled(self) -> None:
        """Wait until the transactions whose callers stopped waiting have finished: PostgreSQL
        ``transact`` ones, the commits or rollbacks ending ``write`` sessions, and ``query``
        reads. (The SQLite writer orders every later transaction after its own.)"""
        if self._in_flight:
            # wait, not gather: a caller cancelled here must not cancel the transactions.
            await asyncio.wait(set(self._in_flight))

    async def close(self) -> None:
        """Finish the SQLite writer's queue, wait for abandoned transactions, then dispose of the pools."""
        if self._writer is not None:
            await self._writer.close()
        await self.settled()  # before the pool goes
        if self._readers is not None:
            await self._readers.close()
        await self._write_engine.dispose()
        if self._read_engine.sync_engine.pool is not self._write_engine.sync_engine.pool:
            await self._read_engine.dispose()  # SQLite's own read pool; PostgreSQL's is shared


def _replace_closed_connections(engine: AsyncEngine) -> None:
    """Hand out no pooled PostgreSQL connection whose socket the server has closed.

    Instead of ``pool_pre_ping`` (a round trip on every checkout, about a fifth of the
    round trips of a create), the pool asks asyncpg, which learns of the close as soon as the
    event loop reads the socket's end: a restart or a terminated session is met at checkout,
    and the pool connects afresh. A close not yet read fails the first statement instead:
    ``transact`` starts over when that was its BEGIN; a session's caller gets UNAVAILABLE,
    which clients retry.
    """

    @event.listens_for(engine.sync_engine, "checkout")
    def refuse_closed(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        driver = record.driver_connection
        if driver is not None and driver.is_closed():
            raise DisconnectionError("the server closed this pooled connection")


def _connection_lost(raw: Any, error: BaseException) -> bool:
    """Whether ``error`` means the connection itself is gone (not a statement's failure)."""
    import asyncpg  # here, not at the top: a SQLite-only server never loads the driver

    if not isinstance(error, Exception):
        return False  # a cancellation: the caller is gone, whatever the connection's state
    return raw.is_closed() or isinstance(error, asyncpg.ConnectionDoesNotExistError | ConnectionError)


def _begun(raw: Any) -> bool:
    """Whether asyncpg still counts a transaction open on ``raw`` (after a failed one it
    should not)."""
    # No public API tells this; asyncpg keeps the outermost open transaction here.
    return getattr(raw, "_top_xact", None) is not None


def null_pool_engine(url: str) -> AsyncEngine:
    """An engine without pooling, for one-off administrative connections (tests, migrations)."""
    return create_async_engine(url, poolclass=NullPool)

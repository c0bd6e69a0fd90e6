"""Transactions written as SQL steps (store/tx.py) and the SQLite writer that groups them."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import sqlite3
from collections.abc import Callable
from functools import partial
from pathlib import Path

import asyncpg
import pytest
import structlog
from sqlalchemy import exc as sqlalchemy_exc

from services.errors import ApiError, Unavailable
from services.store import failures
from services.store import writer as writer_module
from services.store.engine import Database
from services.store.sqlite_driver import open_connection
from services.store.tx import Conflict, Rows, Sql, Tx, expand, numbered, run_in_session
from services.store.writer import SqliteWriter, StorageReplaced, WriterClosed
from tests.conftest import backend
from tsdb.errors import TsdbError, WalError


def add_tenant(tenant_id: str, *, then_fail: bool = False) -> Tx[str]:
    yield Sql(
        "INSERT INTO tenants (tenant_id, display_name, created_us) VALUES (:id, '', 1)",
        {"id": tenant_id},
    )
    if then_fail:
        raise ValueError(f"{tenant_id} failed after writing")
    return tenant_id


def tenant_ids() -> Tx[list[str]]:
    result = yield Sql("SELECT tenant_id FROM tenants ORDER BY tenant_id")
    return [str(row[0]) for row in result.rows]


async def read_tenants(store: Database) -> list[str]:
    async with store.read() as session:
        return await run_in_session(session, tenant_ids())


def tenants_named(prefix: str) -> Tx[list[str]]:
    result = yield Sql("SELECT tenant_id FROM tenants WHERE tenant_id LIKE :p ORDER BY tenant_id", {"p": f"{prefix}%"})
    return [str(row[0]) for row in result.rows]


async def test_transactions_in_order_each_see_those_before_and_fail_alone(store: Database) -> None:
    """Each sees what the ones before it wrote, one that raises after writing is undone and
    answered as its exception, and on SQLite one group commit covers them all."""
    writer = store._writer
    before = writer.commits if writer is not None else 0
    outcomes = await store.transact_in_order(
        [
            partial(add_tenant, "t-a"),
            partial(add_tenant, "t-b", then_fail=True),
            partial(tenants_named, "t-"),
            partial(add_tenant, "t-c"),
        ]
    )
    assert outcomes[0] == "t-a"
    assert isinstance(outcomes[1], ValueError)
    assert outcomes[2:] == [["t-a"], "t-c"]
    assert await read_tenants(store) == ["t-a", "t-c"]
    if writer is not None:
        assert writer.commits - before == 1


async def test_a_failing_transaction_leaves_no_trace_and_spares_the_others(store: Database) -> None:
    """Submitted together (one group on SQLite, one transaction each on PostgreSQL): the one
    that raises after writing is undone, the others commit."""
    results = await asyncio.gather(
        store.transact(partial(add_tenant, "a")),
        store.transact(partial(add_tenant, "b", then_fail=True)),
        store.transact(partial(add_tenant, "c")),
        return_exceptions=True,
    )
    assert results[0] == "a"
    assert isinstance(results[1], ValueError)
    assert results[2] == "c"
    assert await read_tenants(store) == ["a", "c"]


async def test_a_unique_violation_is_a_conflict_and_changes_nothing(store: Database) -> None:
    await store.transact(partial(add_tenant, "a"))

    def add_two() -> Tx[None]:
        yield from add_tenant("z")
        yield from add_tenant("a")

    with pytest.raises(Conflict):
        await store.transact(add_two)
    assert await read_tenants(store) == ["a"]


@pytest.mark.skipif(
    backend() != "postgresql",
    reason="PostgreSQL aborting a transaction for another (runs in .ci/run's PostgreSQL pass); SQLite never does",
)
@pytest.mark.parametrize("sqlstate", ["40P01", "40001"])  # deadlock_detected, serialization_failure
async def test_a_transaction_the_database_aborted_for_another_is_a_conflict(store: Database, sqlstate: str) -> None:
    """Like a lost unique-key race, so that callers that retry races (a create) retry it."""

    def aborted_after_writing() -> Tx[None]:
        yield from add_tenant("z")
        yield Sql(f"DO $$ BEGIN RAISE EXCEPTION 'chosen as the victim' USING ERRCODE = '{sqlstate}'; END $$")

    with pytest.raises(Conflict, match="chosen as the victim"):
        await store.transact(aborted_after_writing)
    assert await read_tenants(store) == []


async def test_in_lists_of_every_length_match_each_row_once_in_a_few_statement_texts(store: Database) -> None:
    """expand pads a list to a power of two with its last value: the rows matched and the rows
    changed are those of the list as given, and 1-70 values make 8 texts, not 70."""
    names = [f"t{i:02d}" for i in range(70)]

    def add_all() -> Tx[None]:
        yield Sql(
            "INSERT INTO tenants (tenant_id, display_name, created_us) VALUES (:id, '', 1)",
            rows=[{"id": name} for name in names],
        )

    def select_and_rename(wanted: list[str]) -> Tx[tuple[str, list[str], int]]:
        ids, params = expand("id", wanted)
        text = f"SELECT tenant_id FROM tenants WHERE tenant_id IN ({ids}) ORDER BY tenant_id"
        selected: Rows = yield Sql(text, params)
        renamed = yield Sql(f"UPDATE tenants SET display_name = 'x' WHERE tenant_id IN ({ids})", params)
        return text, [str(row[0]) for row in selected.rows], renamed.rowcount

    await store.transact(add_all)
    texts = set()
    for length in range(1, len(names) + 1):
        text, selected, renamed = await store.transact(partial(select_and_rename, names[:length]))
        assert selected == names[:length]
        assert renamed == length
        texts.add(text)
    assert len(texts) == 8  # 1, 2, 4, ..., 128 placeholders


def test_a_conflict_escaping_a_handler_is_aborted_for_the_client() -> None:
    error = failures.translate(Conflict("UNIQUE constraint failed: tenants.tenant_id"))
    assert isinstance(error, ApiError)
    assert error.code == "ABORTED"


@pytest.fixture
async def sqlite_file(tmp_path: Path) -> str:
    path = str(tmp_path / "writer.db")
    store = await Database.open(f"sqlite+aiosqlite:///{path}")  # creates the schema
    await store.close()
    return path


async def test_writer_groups_what_arrives_together_into_one_commit(sqlite_file: str) -> None:
    writer = SqliteWriter(sqlite_file, timeout=5)
    await writer.start()
    try:
        before = writer.commits
        names = [f"t{i}" for i in range(10)]
        assert await asyncio.gather(*(writer.run(partial(add_tenant, n)) for n in names)) == names
        assert writer.commits - before == 1
    finally:
        await writer.close()
    with sqlite3.connect(sqlite_file) as raw:
        assert [r[0] for r in raw.execute("SELECT tenant_id FROM tenants ORDER BY tenant_id")] == sorted(names)


async def test_writer_reports_its_load(sqlite_file: str) -> None:
    """The load line counts every group and transaction it covers, and its shares add up."""
    writer = SqliteWriter(sqlite_file, timeout=5, report_seconds=0)
    await writer.start()
    try:
        with structlog.testing.capture_logs() as logs:
            await asyncio.gather(*(writer.run(partial(add_tenant, f"a{i}")) for i in range(6)))
            await writer.run(partial(add_tenant, "b"))
            with pytest.raises(ValueError, match="failed after writing"):
                await writer.run(partial(add_tenant, "c", then_fail=True))
    finally:
        await writer.close()
    reports = [entry for entry in logs if entry["event"] == "sqlite_writer_load"]
    assert [(r["groups"], r["transactions_per_group"], r["groups_not_committed"]) for r in reports] == [
        (1, 6.0, 0),
        (1, 1.0, 0),
        (0, 0.0, 1),  # the lone transaction that failed after writing: its group rolled back
    ]
    for report in reports:
        assert 0 < report["busy"] <= 1
        assert min(report["begin_ms"], report["statements_ms"], report["commit_ms"]) >= 0
        spent = report["begin_ms"] + report["statements_ms"] + report["commit_ms"]
        assert spent <= report["window_s"] * 1000 + 1  # each figure is rounded


async def test_a_load_report_that_cannot_be_written_fails_no_commit(
    sqlite_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report is written after the group's callers have their answers: a log that raises
    (stderr on a full disk) must not turn a committed transaction into an error."""

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer_module.log, "info", broken)
    writer = SqliteWriter(sqlite_file, timeout=5, report_seconds=0)
    await writer.start()
    try:
        assert await writer.run(partial(add_tenant, "kept")) == "kept"
        assert await writer.run(partial(add_tenant, "kept-too")) == "kept-too"
    finally:
        await writer.close()


class Counted:
    """A transaction factory that counts how often the writer builds its transaction."""

    def __init__(self, make: Callable[[], Tx[str]]) -> None:
        self._make = make
        self.built = 0

    def __call__(self) -> Tx[str]:
        self.built += 1
        return self._make()


def refuse_after_reading(tenant_id: str) -> Tx[str]:
    """Fails the way most requests fail: on what it read, before writing anything."""
    yield Sql("SELECT tenant_id FROM tenants WHERE tenant_id = :id", {"id": tenant_id})
    raise LookupError(f"{tenant_id} not found")


async def run_one_group(path: str, jobs: list[Counted]) -> tuple[list[object], int, list[str]]:
    """Submit ``jobs`` together to a new writer; their results, the commits it took, and the
    tenants stored afterwards."""
    writer = SqliteWriter(path, timeout=5)
    await writer.start()
    try:
        results = await asyncio.gather(*(writer.run(job) for job in jobs), return_exceptions=True)
        commits = writer.commits
    finally:
        await writer.close()
    with sqlite3.connect(path) as raw:
        stored = [r[0] for r in raw.execute("SELECT tenant_id FROM tenants ORDER BY tenant_id")]
    return list(results), commits, stored


async def test_a_failure_before_writing_spares_its_group_a_second_pass(sqlite_file: str) -> None:
    jobs = [
        Counted(partial(add_tenant, "a")),
        Counted(partial(refuse_after_reading, "x")),
        Counted(partial(add_tenant, "c")),
    ]
    results, commits, stored = await run_one_group(sqlite_file, jobs)
    assert results[0] == "a"
    assert isinstance(results[1], LookupError)
    assert results[2] == "c"
    assert [job.built for job in jobs] == [1, 1, 1]
    assert (commits, stored) == (1, ["a", "c"])


async def test_a_failure_after_writing_runs_its_group_again_in_savepoints(sqlite_file: str) -> None:
    """The failed transaction's write is undone; the others, run again, commit once each."""
    jobs = [Counted(partial(add_tenant, n, then_fail=n == "b")) for n in ("a", "b", "c")]
    results, commits, stored = await run_one_group(sqlite_file, jobs)
    assert results[0] == "a"
    assert isinstance(results[1], ValueError)
    assert results[2] == "c"
    # "c" was not reached before "b" failed; every transaction ran again in the second pass.
    assert [job.built for job in jobs] == [2, 2, 1]
    assert (commits, stored) == (1, ["a", "c"])


def broken_factory() -> Tx[str]:
    raise TypeError("the transaction could not be built")


async def test_a_factory_that_raises_fails_only_its_own_request(sqlite_file: str) -> None:
    jobs = [Counted(partial(add_tenant, "a")), Counted(broken_factory), Counted(partial(add_tenant, "c"))]
    results, commits, stored = await run_one_group(sqlite_file, jobs)
    assert results[0] == "a"
    assert isinstance(results[1], TypeError)
    assert results[2] == "c"
    assert (commits, stored) == (1, ["a", "c"])


async def test_writer_answers_only_after_the_commit_is_visible_to_others(sqlite_file: str) -> None:
    writer = SqliteWriter(sqlite_file, timeout=5)
    await writer.start()
    try:
        await writer.run(partial(add_tenant, "durable"))
        # A separate connection sees it at once: the answer came after COMMIT, not before.
        with sqlite3.connect(sqlite_file) as raw:
            assert raw.execute("SELECT count(*) FROM tenants WHERE tenant_id = 'durable'").fetchone() == (1,)
    finally:
        await writer.close()


async def test_writer_locked_out_past_its_timeout_fails_the_group_then_recovers(sqlite_file: str) -> None:
    """Another process holding the write lock longer than the busy timeout: the waiting
    transactions fail (UNAVAILABLE for a client), none is half-applied, the next one runs."""
    writer = SqliteWriter(sqlite_file, timeout=0.2)
    await writer.start()
    holder = sqlite3.connect(sqlite_file, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError) as raised:
            await writer.run(partial(add_tenant, "blocked"))
        translated = failures.translate(raised.value)
        assert isinstance(translated, Unavailable)
        holder.execute("ROLLBACK")
        assert await writer.run(partial(add_tenant, "after")) == "after"
        rows = [r[0] for r in holder.execute("SELECT tenant_id FROM tenants ORDER BY tenant_id")]
        assert rows == ["after"]
    finally:
        holder.close()
        await writer.close()


async def test_writer_waits_out_a_lock_shorter_than_its_timeout_without_holding_the_loop(sqlite_file: str) -> None:
    """The writer's connection tries BEGIN with no busy wait; held elsewhere, the lock is
    waited for on the writer's thread: the transaction commits once it is free, and the loop
    runs meanwhile."""
    writer = SqliteWriter(sqlite_file, timeout=5)
    await writer.start()
    holder = sqlite3.connect(sqlite_file, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        blocked = asyncio.ensure_future(writer.run(partial(add_tenant, "waited")))
        ticks = 0
        for _ in range(20):
            await asyncio.sleep(0)  # a turn of the loop, which a BEGIN waiting on it would block
            ticks += 1
        assert not blocked.done()
        holder.execute("ROLLBACK")
        assert await blocked == "waited"
        assert ticks == 20
        assert [r[0] for r in holder.execute("SELECT tenant_id FROM tenants")] == ["waited"]
    finally:
        holder.close()
        await writer.close()


async def test_writer_close_runs_what_is_queued_and_then_refuses(sqlite_file: str) -> None:
    writer = SqliteWriter(sqlite_file, timeout=5)
    await writer.start()
    queued = [writer.submit(partial(add_tenant, f"q{i}")) for i in range(5)]
    await writer.close()
    assert [await q for q in queued] == [f"q{i}" for i in range(5)]
    with pytest.raises(WriterClosed):
        await writer.run(partial(add_tenant, "late"))


async def test_writer_survives_a_fault_of_its_own(sqlite_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected error inside the writer fails that group's callers; later calls still run."""
    from services.store import writer as writer_module

    real_attempt = writer_module._attempt
    calls = 0

    def faulty_attempt(connection: sqlite3.Connection, make: Callable[[], Tx[object]]) -> tuple[bool, object]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("injected fault")
        return real_attempt(connection, make)

    monkeypatch.setattr(writer_module, "_attempt", faulty_attempt)
    writer = SqliteWriter(sqlite_file, timeout=5)
    await writer.start()
    try:
        with pytest.raises(RuntimeError, match="injected fault"):
            await writer.run(partial(add_tenant, "first"))
        assert await writer.run(partial(add_tenant, "second")) == "second"
    finally:
        await writer.close()
    with sqlite3.connect(sqlite_file) as raw:
        assert [r[0] for r in raw.execute("SELECT tenant_id FROM tenants")] == ["second"]


async def test_a_caller_that_gave_up_before_its_turn_is_not_committed(sqlite_file: str) -> None:
    """A create whose client went away while it queued must not commit unseen."""
    lock = asyncio.Lock()
    writer = SqliteWriter(sqlite_file, timeout=5, lock=lock)
    await writer.start()
    try:
        async with lock:  # another write holds the database: the caller queues
            abandoned = writer.submit(partial(add_tenant, "abandoned"))
            abandoned.cancel()
        assert await writer.run(partial(add_tenant, "kept")) == "kept"
        assert abandoned.cancelled()
    finally:
        await writer.close()
    with sqlite3.connect(sqlite_file) as raw:
        assert [r[0] for r in raw.execute("SELECT tenant_id FROM tenants")] == ["kept"]


async def test_a_stopped_pump_fails_waiting_callers_instead_of_leaving_them_hanging(sqlite_file: str) -> None:
    lock = asyncio.Lock()
    writer = SqliteWriter(sqlite_file, timeout=5, lock=lock)
    await writer.start()
    async with lock:
        waiting = writer.submit(partial(add_tenant, "waiting"))
        pump = writer._pump
        assert pump is not None
        pump.cancel()  # as an event loop's teardown would
        with contextlib.suppress(asyncio.CancelledError):
            await pump
    with pytest.raises(WriterClosed):
        await asyncio.wait_for(waiting, 10)  # bounded: without the fix it would hang
    with pytest.raises(WriterClosed):
        await asyncio.wait_for(writer.run(partial(add_tenant, "late")), 10)
    await writer.close()  # closes the connection even though the pump is gone


def sqlite_error(sql: str) -> sqlite3.OperationalError:
    """A real error from SQLite, with its error code, for ``sql`` on an empty database."""
    with sqlite3.connect(":memory:") as raw:
        try:
            raw.execute(sql)
        except sqlite3.OperationalError as error:
            return error
    raise AssertionError(f"{sql!r} did not fail")


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (WriterClosed("the store is closed"), "UNAVAILABLE"),
        (Conflict("UNIQUE constraint failed"), "ABORTED"),
        # A bug, not a busy database: retrying cannot help.
        (sqlite_error("SELECT x FROM nowhere"), None),
        (asyncpg.exceptions.DeadlockDetectedError("deadlock detected"), "ABORTED"),
        (asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"), "UNAVAILABLE"),
        (asyncpg.exceptions.UndefinedColumnError("column x does not exist"), None),
        # A session whose connection the server closed: SQLAlchemy wraps the driver's error in
        # its base DBAPIError and invalidates the connection.
        (
            sqlalchemy_exc.DBAPIError(
                "SELECT 1", {}, asyncpg.exceptions.ConnectionDoesNotExistError("gone"), connection_invalidated=True
            ),
            "UNAVAILABLE",
        ),
        (sqlalchemy_exc.DBAPIError("SELECT 1", {}, ValueError("bad bind")), None),
        # A restarting or full server refuses the connection that replaces a dead one.
        (asyncpg.exceptions.CannotConnectNowError("the database system is starting up"), "UNAVAILABLE"),
        (asyncpg.exceptions.AdminShutdownError("terminating connection"), "UNAVAILABLE"),
        (asyncpg.exceptions.TooManyConnectionsError("too many clients already"), "UNAVAILABLE"),
        (
            sqlalchemy_exc.DBAPIError(
                "SELECT 1", {}, asyncpg.exceptions.CannotConnectNowError("the database system is shutting down")
            ),
            "UNAVAILABLE",
        ),
    ],
)
def test_which_database_failures_a_client_may_retry(error: BaseException, code: str | None) -> None:
    translated = failures.translate(error)
    assert (translated.code if translated is not None else None) == code


def test_binds_are_renumbered_for_asyncpg_once_per_name() -> None:
    sql, names = numbered("SELECT :a || '/' || x::text, :b FROM t WHERE y = :a LIMIT :limit")
    assert sql == "SELECT $1 || '/' || x::text, $2 FROM t WHERE y = $1 LIMIT $3"
    assert names == ("a", "b", "limit")


async def test_a_read_sees_one_snapshot_while_others_commit(store: Database) -> None:
    """Both databases: what commits during a read transaction stays out of it (on PostgreSQL
    that takes REPEATABLE READ; at READ COMMITTED the second count would see the new row)."""

    def count() -> Tx[int]:
        result = yield Sql("SELECT count(*) FROM tenants")
        return int(result.rows[0][0])

    await store.transact(partial(add_tenant, "before"))
    async with store.read() as session:
        assert await run_in_session(session, count()) == 1
        await store.transact(partial(add_tenant, "during"))
        assert await run_in_session(session, count()) == 1
    assert sorted(await read_tenants(store)) == ["before", "during"]


def _real_sqlite_error(tmp_path: Path, *, full: bool) -> sqlite3.OperationalError:
    """A real SQLite error: the disk full (a page limit stands in for it) or a read-only file."""
    path = tmp_path / "scratch.db"
    setup = sqlite3.connect(path)
    setup.execute("CREATE TABLE t (x BLOB)")
    setup.commit()
    setup.close()
    if full:
        connection = sqlite3.connect(path)
        connection.execute("PRAGMA max_page_count = 3")
    else:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as raised:
        connection.executescript("INSERT INTO t VALUES (zeroblob(100000));")
    connection.close()
    return raised.value


@pytest.mark.parametrize(("full", "reason"), [(True, "STORAGE_FULL"), (False, "STORAGE_ERROR")])
def test_a_full_or_read_only_sqlite_is_unavailable_naming_the_cause(tmp_path: Path, full: bool, reason: str) -> None:
    """Raw (the writer) or wrapped by SQLAlchemy (reads, other writes): UNAVAILABLE, never INTERNAL."""
    error = _real_sqlite_error(tmp_path, full=full)
    for raised in (error, sqlalchemy_exc.OperationalError("INSERT ...", {}, error)):
        translated = failures.translate(raised)
        assert isinstance(translated, Unavailable)
        assert translated.reason == reason


def test_a_full_disk_under_the_metrics_log_is_storage_full() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as cause:
            raise WalError("WAL write failed: no space") from cause
    except WalError as error:
        translated = failures.translate(error)
    assert isinstance(translated, Unavailable)
    assert translated.reason == "STORAGE_FULL"


@pytest.mark.parametrize(("code", "reason"), [(errno.ENOSPC, "STORAGE_FULL"), (errno.EIO, "STORAGE_ERROR")])
def test_a_metrics_file_the_disk_refused_is_unavailable_not_internal(code: int, reason: str) -> None:
    """The catalog's TsdbError (from its own file write) answers UNAVAILABLE naming the cause."""
    try:
        try:
            raise OSError(code, "the disk refused the write")
        except OSError as cause:
            raise TsdbError(f"catalog write failed: {cause}") from cause
    except TsdbError as error:
        translated = failures.translate(error)
    assert isinstance(translated, Unavailable)
    assert translated.reason == reason
    assert failures.translate(TsdbError("a bug, not the disk")) is None


async def test_a_session_commit_to_a_deleted_database_file_is_not_acknowledged(tmp_path: Path) -> None:
    """``Database.write()`` sessions (tests and tools setting up rows) commit on a connection of
    their own: after the file is deleted, their commits fail rather than answer OK and be lost."""
    path = tmp_path / "gone.db"
    store = await Database.open(f"sqlite+aiosqlite:///{path}")

    async def add_in_session(tenant_id: str) -> None:
        async with store.write() as session:
            await run_in_session(session, add_tenant(tenant_id))

    try:
        await add_in_session("before")
        for suffix in ("", "-wal", "-shm"):
            await asyncio.to_thread(Path(f"{path}{suffix}").unlink, missing_ok=True)
        with pytest.raises(StorageReplaced) as raised:
            await add_in_session("after")
        translated = failures.translate(raised.value)
        assert isinstance(translated, Unavailable)
        assert translated.reason == "STORAGE_ERROR"
    finally:
        await store.close()


async def test_a_database_file_deleted_under_the_writer_acknowledges_nothing_more(sqlite_file: str) -> None:
    """The commit lands in a file nobody will open again: the caller hears STORAGE_ERROR, not OK."""
    writer = SqliteWriter(sqlite_file, timeout=5)
    await writer.start()
    try:
        assert await writer.run(partial(add_tenant, "before")) == "before"
        for suffix in ("", "-wal", "-shm"):
            await asyncio.to_thread(Path(sqlite_file + suffix).unlink, missing_ok=True)
        with pytest.raises(StorageReplaced) as raised:
            await writer.run(partial(add_tenant, "after"))
        translated = failures.translate(raised.value)
        assert isinstance(translated, Unavailable)
        assert translated.reason == "STORAGE_ERROR"
        with pytest.raises(StorageReplaced):
            await writer.run(partial(add_tenant, "later"))
    finally:
        await writer.close()
    # And a new connection does not quietly make an empty database in its place.
    with pytest.raises(sqlite3.OperationalError):
        await asyncio.to_thread(open_connection, sqlite_file, timeout=1)
    assert not await asyncio.to_thread(Path(sqlite_file).exists)

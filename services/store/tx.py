"""Transactions as generators of SQL: written once, run on either database in one piece.

A hot-path transaction (create, cancel, release) is a generator that yields ``Sql`` and is
sent back ``Rows``; it does no I/O itself (the "sans-I/O" style of h11). Three runners drive it:

- ``run_on_connection`` on a plain ``sqlite3`` connection, inside the SQLite writer's group
  (store/writer.py): raw sqlite3 calls, since SQLAlchemy's async pipeline costs many times
  what SQLite spends on the statement itself.
- ``run_on_asyncpg`` on PostgreSQL's driver connection, one await per statement.
- ``run_in_session`` on an SQLAlchemy async session: the reads of either database
  (``Database.query``), each in one read-only snapshot.

Every repository reads and writes this way: writes are steps run by ``Database.transact``,
reads are steps run by ``Database.query``. Steps compose with ``yield from``, so a repository
function that returns ``Tx[T]`` is a piece of any transaction. SQL is text, written in the
dialect both databases accept (``:name`` binds, ``TRUE``/``FALSE``, row values); where they
differ (row locks) the step takes ``locking`` and adds the clause only for PostgreSQL. The
runners hand rows back as the drivers give them: SQLite's booleans are 0 and 1, so a step
that reads one converts it with ``bool``.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import exc, text
from sqlmodel.ext.asyncio.session import AsyncSession

T = TypeVar("T")
Params = Mapping[str, Any]


# Sql and Rows are named tuples rather than frozen dataclasses: a transaction makes one of
# each per statement, and a frozen dataclass's __init__ (object.__setattr__ per field) costs
# about twice a named tuple's.
_NO_PARAMS: Params = MappingProxyType({})


class Sql(NamedTuple):
    """One statement: ``params`` for one execution, or ``rows`` for an executemany."""

    text: str
    params: Params = _NO_PARAMS
    rows: Sequence[Params] | None = None


class Rows(NamedTuple):
    """What a statement gave back: its rows (empty for writes) and the rows it changed."""

    rows: list[Sequence[Any]]
    rowcount: int

    def first(self) -> Sequence[Any] | None:
        """The first row, or None when there is none."""
        return self.rows[0] if self.rows else None


Tx = Generator[Sql, Rows, T]


class Conflict(Exception):
    """A concurrent transaction got there first: a unique or foreign-key constraint refused a
    write (``Refused``), or the database aborted this one for another (``Deadlock``). Nothing of
    the transaction is kept; the caller looks again in a new one."""


class Refused(Conflict):
    """A unique or foreign-key constraint refused a write: the row is there already (or the one
    it refers to is not), most likely written by a concurrent transaction."""


class Deadlock(Conflict):
    """PostgreSQL aborted the transaction to break a deadlock or a serialization failure: a
    victim of timing, which running it again resolves (unlike a constraint, which may not)."""


def expand(name: str, values: Iterable[Any]) -> tuple[str, dict[str, Any]]:
    """Placeholders and binds for ``IN (...)``: ``(":n0, :n1", {"n0": a, "n1": b})``.

    The list is padded to the next power of two by repeating its last value, which ``IN``
    ignores. A statement then has a handful of texts instead of one per length, so SQLite's and
    asyncpg's statement caches (128 and 100 texts) keep them: with a text per length, releases
    of 1-64 allocations would cycle hundreds of texts through the cache, each parsed and planned
    anew.

    Callers never pass an empty list (``IN ()`` is not valid SQL on PostgreSQL).
    """
    padded = list(values)
    padded += padded[-1:] * ((1 << (len(padded) - 1).bit_length()) - len(padded))
    binds = {f"{name}{i}": value for i, value in enumerate(padded)}
    return ", ".join(":" + key for key in binds), binds


def savepoint(name: str) -> Tx[None]:
    """A savepoint ``rollback_to(name)`` can return to, undoing the writes and releasing the
    row locks taken after it (PostgreSQL)."""
    yield Sql(f"SAVEPOINT {name}")


def rollback_to(name: str) -> Tx[None]:
    """Undo everything since ``savepoint(name)``; the transaction goes on."""
    yield Sql(f"ROLLBACK TO SAVEPOINT {name}")


def for_update(locking: bool, *, skip_locked: bool = False) -> str:
    """The row-lock clause on PostgreSQL; nothing on SQLite, whose writer holds the one
    database-wide write lock for the whole transaction."""
    if not locking:
        return ""
    return " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"


def run_on_connection(connection: sqlite3.Connection, tx: Tx[T]) -> T:
    """Drive ``tx`` on a sqlite3 connection already inside a transaction."""
    # One cursor for the whole transaction: ``connection.execute`` makes (and registers) a
    # new cursor for every statement.
    cursor = connection.cursor()
    try:
        statement = next(tx)
        while True:
            try:
                if statement.rows is not None:
                    cursor.executemany(statement.text, statement.rows)
                elif statement.params:
                    cursor.execute(statement.text, statement.params)
                else:
                    cursor.execute(statement.text)  # sqlite3 takes a dict or a sequence, not a mapping proxy
            except sqlite3.IntegrityError as error:
                raise Refused(str(error)) from error
            rows = cursor.fetchall() if cursor.description else []
            statement = tx.send(Rows(rows, cursor.rowcount))
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        cursor.close()
        tx.close()


async def _drive(tx: Tx[T], execute: Callable[[Sql], Awaitable[Rows]]) -> T:
    """Drive ``tx`` with an async driver: ``execute`` runs each statement it yields, and what
    that gives back is sent to it."""
    try:
        statement = next(tx)
        while True:
            statement = tx.send(await execute(statement))
    except StopIteration as done:
        value: T = done.value
        return value
    finally:
        tx.close()


async def run_in_session(session: AsyncSession, tx: Tx[T]) -> T:
    """Drive ``tx`` inside an SQLAlchemy async session's transaction (the reads of either database)."""
    connection = await session.connection()

    async def execute(statement: Sql) -> Rows:
        try:
            if statement.rows is not None:
                result = await connection.execute(text(statement.text), list(statement.rows))
            else:
                result = await connection.execute(text(statement.text), dict(statement.params))
        except exc.IntegrityError as error:
            raise Refused(str(error.orig)) from error
        rows: list[Sequence[Any]] = list(result.all()) if result.returns_rows else []
        return Rows(rows, result.rowcount)

    return await _drive(tx, execute)


# A statement that returns rows though it is not a SELECT.
_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)

# A ``:name`` bind; not ``::type`` casts.
_NAMED_BIND = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@functools.lru_cache(maxsize=512)
def numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with ``:name`` binds as asyncpg's ``$n``, and the names in ``$n`` order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _NAMED_BIND.sub(number, sql), tuple(names)


async def run_on_asyncpg(raw: Any, tx: Tx[T]) -> T:
    """Drive ``tx`` on an asyncpg connection the caller has put inside a transaction.

    Binds are renumbered once per statement text. Used for PostgreSQL writes: SQLAlchemy's
    per-statement pipeline costs more than a round trip to a local server.
    """
    import asyncpg  # here, not at the top: a SQLite-only server never loads the driver

    async def execute(statement: Sql) -> Rows:
        sql, names = numbered(statement.text)
        try:
            if statement.rows is not None:
                await raw.executemany(sql, [[row[n] for n in names] for row in statement.rows])
                return Rows([], len(statement.rows))
            if sql.lstrip().startswith("SELECT") or _RETURNING.search(sql):
                records = await raw.fetch(sql, *(statement.params[n] for n in names))
                return Rows(list(records), len(records))
            status: str = await raw.execute(sql, *(statement.params[n] for n in names))
        except asyncpg.IntegrityConstraintViolationError as error:
            raise Refused(str(error)) from error
        except asyncpg.TransactionRollbackError as error:
            raise Deadlock(str(error)) from error
        # "UPDATE 3", "DELETE 0", "INSERT 0 16": the count is the last word; "SAVEPOINT" and
        # "ROLLBACK" carry none.
        count = status.rsplit(" ", 1)[-1]
        return Rows([], int(count) if count.isdigit() else 0)

    return await _drive(tx, execute)

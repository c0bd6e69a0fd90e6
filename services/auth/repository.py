"""Persistence of API tokens (hashed) and the first-start operator credential."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from services.auth import tokens
from services.auth.principal import Principal, Role
from services.clock import now_us
from services.data_dir import PRIVATE_FILE, narrow_to_owner
from services.paging import Cursor, newest_first
from services.store.engine import Database
from services.store.models import TokenRow
from services.store.tx import Tx

OPERATOR_TOKEN_FILE = "operator.token"
# Arbitrary, fixed: the PostgreSQL advisory lock under which a starting replica checks for an
# operator and mints the first one.
BOOTSTRAP_LOCK_ID = 0x67707564  # 'gpud'


async def issue_token(
    session: AsyncSession, role: Role, *, tenant_id: str | None = None, node_id: str | None = None
) -> tokens.IssuedToken:
    """Database a new credential; the plaintext it returns is never stored."""
    issued = tokens.issue()
    session.add(
        TokenRow(
            token_id=issued.token_id,
            secret_sha256=issued.secret_sha256,
            role=role,
            tenant_id=tenant_id,
            node_id=node_id,
            created_us=now_us(),
        )
    )
    await session.flush()
    return issued


async def create_token(
    session: AsyncSession, role: Role, *, tenant_id: str | None = None, node_id: str | None = None
) -> str:
    """Database a new credential and return its plaintext, which is never stored."""
    return (await issue_token(session, role, tenant_id=tenant_id, node_id=node_id)).plaintext


@dataclass(frozen=True)
class TokenInfo:
    """A credential as operators may see it: everything but its secret's digest."""

    token_id: str
    role: Role
    tenant_id: str | None
    node_id: str | None
    created_us: int
    revoked_us: int | None

    @classmethod
    def of(cls, row: TokenRow) -> TokenInfo:
        """The visible part of a stored token."""
        return cls(row.token_id, Role(row.role), row.tenant_id, row.node_id, row.created_us, row.revoked_us)


@dataclass(frozen=True)
class TokenFilter:
    """Which tokens a listing keeps; None keeps any."""

    tenant_id: str | None = None
    node_id: str | None = None
    role: Role | None = None


# Never the digest: a listing has no use for it, and what is not read cannot leak.
_INFO_COLUMNS = "token_id, role, tenant_id, node_id, created_us, revoked_us"


def list_page(flt: TokenFilter, *, cursor: Cursor | None, limit: int) -> Tx[list[TokenInfo]]:
    """Newest first by (created_us, token_id): immutable, with a unique tiebreaker."""
    role = None if flt.role is None else flt.role.value
    page = newest_first(
        f"SELECT {_INFO_COLUMNS} FROM api_tokens",
        "token_id",
        {"tenant_id": flt.tenant_id, "node_id": flt.node_id, "role": role},
        cursor=cursor,
        limit=limit,
    )
    return [_info(r) for r in (yield page).rows]


def _info(r: Sequence[Any]) -> TokenInfo:
    return TokenInfo(r[0], Role(r[1]), r[2], r[3], r[4], r[5])


class _LastOperator:
    """The answer of ``revoke`` when the token is the last operator token not revoked."""


LAST_OPERATOR = _LastOperator()


async def revoke(session: AsyncSession, token_id: str, *, now_us: int) -> TokenInfo | _LastOperator | None:
    """Revoke ``token_id`` in the session's transaction: the token as it is now (a revoked one
    unchanged, its first revoke time kept), None if there is no such token, or
    ``LAST_OPERATOR`` (nothing changed) if it is the last operator token not revoked."""
    row = await session.get(TokenRow, token_id)
    if row is None:
        return None
    # A token's role never changes, so it may be read before any lock. Operator tokens lock
    # the whole live set first, the target among them, always in one order.
    live_operators = await _lock_live_operators(session) if row.role == Role.OPERATOR else None
    # Read again under the lock: a concurrent revoke may have committed meanwhile.
    await session.refresh(row, with_for_update=True)
    if row.revoked_us is None:
        if live_operators is not None and len(live_operators) <= 1:
            return LAST_OPERATOR
        row.revoked_us = now_us
        session.add(row)
        await session.flush()
    return TokenInfo.of(row)


async def _lock_live_operators(session: AsyncSession) -> list[str]:
    """The ids of the operator tokens not revoked, locked on PostgreSQL in id order, so that
    concurrent revokes of two operator tokens queue instead of each leaving the other the last."""
    query = (
        select(TokenRow.token_id)
        .where(col(TokenRow.role) == Role.OPERATOR, col(TokenRow.revoked_us).is_(None))
        .order_by(col(TokenRow.token_id))
        .with_for_update()
    )
    return list((await session.exec(query)).all())


async def resolve(session: AsyncSession, plaintext: str) -> Principal | None:
    """The principal a presented token stands for, or None if it is unknown or revoked."""
    parts = tokens.split(plaintext)
    if parts is None:
        return None
    token_id, secret = parts
    row = await session.get(TokenRow, token_id)
    if row is None or row.revoked_us is not None or not tokens.matches(secret, row.secret_sha256):
        return None
    return Principal(token_id=row.token_id, role=Role(row.role), tenant_id=row.tenant_id, node_id=row.node_id)


async def bootstrap_operator(store: Database, data_dir: Path) -> Path | None:
    """On a fresh database, mint the first operator token into ``data_dir/operator.token``.

    Returns the file's path when a token was created, None when operators already exist.
    The file is made ``PRIVATE_FILE`` before the token is written, so it is never
    world-readable; one already there that group or others may read is narrowed to its owner.
    """
    path = data_dir / OPERATOR_TOKEN_FILE
    await asyncio.to_thread(narrow_to_owner, path)
    async with store.write() as session:
        if store.dialect == "postgresql":
            # Replicas starting together on a fresh database would each find no operator (READ
            # COMMITTED) and each mint one. One at a time, a later one sees the first's token.
            # (SQLite's writes already run one at a time.)
            connection = await session.connection()
            await connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({BOOTSTRAP_LOCK_ID})")
        query = select(TokenRow.token_id).where(col(TokenRow.role) == Role.OPERATOR).limit(1)
        if (await session.exec(query)).first() is not None:
            return None
        plaintext = await create_token(session, Role.OPERATOR)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
        # The mode above applies only to a new file, less the umask: one there already keeps
        # its own unless it is set before the token goes in.
        os.fchmod(descriptor, PRIVATE_FILE)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(plaintext + "\n")
        return path

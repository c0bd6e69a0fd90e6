"""Persistence of API tokens (hashed) and the first-start operator credential."""

from __future__ import annotations

import os
from pathlib import Path

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from services.auth import tokens
from services.auth.principal import Principal, Role
from services.clock import now_us
from services.store.engine import Store
from services.store.models import TokenRow

OPERATOR_TOKEN_FILE = "operator.token"
# Arbitrary, fixed: the PostgreSQL advisory lock under which a starting replica checks for an
# operator and mints the first one.
BOOTSTRAP_LOCK_ID = 0x67707564  # 'gpud'


async def create_token(
    session: AsyncSession, role: Role, *, tenant_id: str | None = None, node_id: str | None = None
) -> str:
    """Store a new credential and return its plaintext, which is never stored."""
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
    return issued.plaintext


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


async def bootstrap_operator(store: Store, data_dir: Path) -> Path | None:
    """On a fresh database, mint the first operator token into ``data_dir/operator.token``.

    Returns the file's path when a token was created, None when operators already exist.
    The file is made 0600 before the token is written, so it is never world-readable.
    """
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
        path = data_dir / OPERATOR_TOKEN_FILE
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        # The mode above applies only to a new file: one left from an earlier database keeps
        # its own, perhaps world-readable, unless it is set before the token goes in.
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(plaintext + "\n")
        return path

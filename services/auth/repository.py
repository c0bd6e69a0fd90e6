"""Persistence of API tokens (hashed) and the first-start operator credential, as transaction
steps (store/tx.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from services.auth import tokens
from services.auth.principal import Principal, Role
from services.clock import now_us
from services.data_dir import PRIVATE_FILE, narrow_to_owner
from services.paging import Cursor, newest_first
from services.store.engine import Database
from services.store.tx import Sql, Tx, for_update

OPERATOR_TOKEN_FILE = "operator.token"
# Arbitrary, fixed: the PostgreSQL advisory lock under which a starting replica checks for an
# operator and mints the first one.
BOOTSTRAP_LOCK_ID = 0x67707564  # 'gpud'


def insert_token(
    issued: tokens.IssuedToken, role: Role, *, tenant_id: str | None = None, node_id: str | None = None, now_us: int
) -> Tx[None]:
    """Store a credential minted by ``tokens.issue``: its digest, never its plaintext."""
    yield Sql(
        "INSERT INTO api_tokens (token_id, secret_sha256, role, tenant_id, node_id, created_us, revoked_us)"
        " VALUES (:token_id, :digest, :role, :tenant_id, :node_id, :now, NULL)",
        {
            "token_id": issued.token_id,
            "digest": issued.secret_sha256,
            "role": role.value,
            "tenant_id": tenant_id,
            "node_id": node_id,
            "now": now_us,
        },
    )


@dataclass(frozen=True)
class TokenInfo:
    """A credential as operators may see it: everything but its secret's digest."""

    token_id: str
    role: Role
    tenant_id: str | None
    node_id: str | None
    created_us: int
    revoked_us: int | None


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


def _token_info(token_id: str, *, locking: bool = False) -> Tx[TokenInfo | None]:
    """The token, locked for the transaction when ``locking`` (PostgreSQL); None if unknown."""
    sql = f"SELECT {_INFO_COLUMNS} FROM api_tokens WHERE token_id = :id" + for_update(locking)
    found = (yield Sql(sql, {"id": token_id})).first()
    return None if found is None else _info(found)


def revoke(token_id: str, *, now_us: int, locking: bool) -> Tx[TokenInfo | _LastOperator | None]:
    """Revoke ``token_id``: the token as it is now (a revoked one unchanged, its first revoke
    time kept), None if there is no such token, or ``LAST_OPERATOR`` (nothing changed) if it is
    the last operator token not revoked. ``locking``: take row locks (PostgreSQL)."""
    info = yield from _token_info(token_id)
    if info is None:
        return None
    # A token's role never changes, so it may be read before any lock. Operator tokens lock
    # the whole live set first, the target among them, always in one order.
    live_operators = (yield from _lock_live_operators(locking)) if info.role == Role.OPERATOR else None
    # Read again under the lock: a concurrent revoke may have committed meanwhile.
    info = yield from _token_info(token_id, locking=locking)
    assert info is not None, "tokens are never deleted"
    if info.revoked_us is None:
        if live_operators is not None and len(live_operators) <= 1:
            return LAST_OPERATOR
        yield Sql("UPDATE api_tokens SET revoked_us = :now WHERE token_id = :id", {"now": now_us, "id": token_id})
        info = replace(info, revoked_us=now_us)
    return info


def _lock_live_operators(locking: bool) -> Tx[list[str]]:
    """The ids of the operator tokens not revoked, locked on PostgreSQL in id order, so that
    concurrent revokes of two operator tokens queue instead of each leaving the other the last."""
    result = yield Sql(
        "SELECT token_id FROM api_tokens WHERE role = :role AND revoked_us IS NULL ORDER BY token_id"
        + for_update(locking),
        {"role": Role.OPERATOR.value},
    )
    return [str(r[0]) for r in result.rows]


def resolve(plaintext: str) -> Tx[Principal | None]:
    """The principal a presented token stands for, or None if it is unknown or revoked."""
    parts = tokens.split(plaintext)
    if parts is None:
        return None
    token_id, secret = parts
    found = (
        yield Sql(
            "SELECT token_id, secret_sha256, role, tenant_id, node_id, revoked_us FROM api_tokens WHERE token_id = :id",
            {"id": token_id},
        )
    ).first()
    if found is None:
        return None
    token_id, digest, role, tenant_id, node_id, revoked_us = found
    if revoked_us is not None or not tokens.matches(secret, digest):
        return None
    return Principal(token_id=token_id, role=Role(role), tenant_id=tenant_id, node_id=node_id)


def revoked_since(since_us: int) -> Tx[list[str]]:
    """The ids of the tokens revoked at or after ``since_us``."""
    result = yield Sql("SELECT token_id FROM api_tokens WHERE revoked_us >= :since", {"since": since_us})
    return [str(r[0]) for r in result.rows]


def _mint_first_operator(
    issued: tokens.IssuedToken, *, now_us: int, locking: bool, save: Callable[[str], None]
) -> Tx[bool]:
    """Store ``issued`` as an operator token unless one exists, and ``save`` its plaintext
    before the transaction commits (a file that could not be written keeps no token); whether
    it was stored."""
    if locking:
        # Replicas starting together on a fresh database would each find no operator (READ
        # COMMITTED) and each mint one. One at a time, a later one sees the first's token.
        # (SQLite's writes already run one at a time.)
        yield Sql(f"SELECT pg_advisory_xact_lock({BOOTSTRAP_LOCK_ID})")
    found = yield Sql("SELECT token_id FROM api_tokens WHERE role = :role LIMIT 1", {"role": Role.OPERATOR.value})
    if found.first() is not None:
        return False
    yield from insert_token(issued, Role.OPERATOR, now_us=now_us)
    save(issued.plaintext)
    return True


def _write_token_file(path: Path, plaintext: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    # The mode above applies only to a new file, less the umask: one there already keeps
    # its own unless it is set before the token goes in.
    os.fchmod(descriptor, PRIVATE_FILE)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(plaintext + "\n")


async def bootstrap_operator(store: Database, data_dir: Path) -> Path | None:
    """On a fresh database, mint the first operator token into ``data_dir/operator.token``.

    Returns the file's path when a token was created, None when operators already exist.
    The file is made ``PRIVATE_FILE`` before the token is written, so it is never
    world-readable; one already there that group or others may read is narrowed to its owner.
    """
    path = data_dir / OPERATOR_TOKEN_FILE
    await asyncio.to_thread(narrow_to_owner, path)
    mint = partial(
        _mint_first_operator,
        tokens.issue(),
        now_us=now_us(),
        locking=store.dialect == "postgresql",
        save=partial(_write_token_file, path),
    )
    return path if await store.transact(mint) else None

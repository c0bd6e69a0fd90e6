"""Minting agent and operator credentials, listing credentials and revoking them."""

from __future__ import annotations

from functools import partial

from services.auth import repository as repo
from services.auth import tokens
from services.auth.authenticator import Authenticator
from services.auth.principal import Role
from services.auth.repository import TokenFilter, TokenInfo
from services.auth.tokens import IssuedToken
from services.clock import now_us
from services.errors import FailedPrecondition, NotFound
from services.paging import Cursor
from services.store.engine import Database
from services.store.tx import Tx
from services.tenants import repository as tenants_repo


async def create_agent_token(store: Database, node_id: str) -> IssuedToken:
    """Mint an agent token bound to ``node_id``, which need not be registered yet: its agent
    registers it with this token."""
    issued = tokens.issue()
    await store.transact(partial(repo.insert_token, issued, Role.AGENT, node_id=node_id, now_us=now_us()))
    return issued


async def create_operator_token(store: Database) -> IssuedToken:
    """Mint another operator token: rotation is mint, switch, then revoke the old one."""
    issued = tokens.issue()
    await store.transact(partial(repo.insert_token, issued, Role.OPERATOR, now_us=now_us()))
    return issued


async def list_page(store: Database, flt: TokenFilter, *, cursor: Cursor | None, limit: int) -> list[TokenInfo]:
    """Up to ``limit`` tokens newest first, after ``cursor``; NOT_FOUND when the filter names a
    tenant that does not exist, as an operator's allocation listing does."""
    return await store.query(_page(flt, cursor=cursor, limit=limit))


def _page(flt: TokenFilter, *, cursor: Cursor | None, limit: int) -> Tx[list[TokenInfo]]:
    if flt.tenant_id is not None:
        yield from tenants_repo.require(flt.tenant_id)
    return (yield from repo.list_page(flt, cursor=cursor, limit=limit))


async def revoke(store: Database, authenticator: Authenticator, token_id: str) -> TokenInfo:
    """Revoke a token and stop this server accepting it at once; a revoked token is returned as
    it is (its first revoke time kept). The last operator token that is not revoked cannot be:
    nobody could then run the fleet, nor mint a new operator token."""
    revoking = partial(repo.revoke, token_id, now_us=now_us(), locking=store.dialect == "postgresql")
    outcome = await store.transact(revoking)
    if outcome is None:
        raise token_not_found(token_id)
    if not isinstance(outcome, TokenInfo):  # repo.LAST_OPERATOR: nothing changed
        raise last_operator_token(token_id)
    # Also after a repeat: this replica may still hold the token that another one revoked.
    authenticator.forget(token_id)
    return outcome


def token_not_found(token_id: str) -> NotFound:
    """NOT_FOUND (TOKEN_NOT_FOUND) naming ``token_id``."""
    return NotFound(
        reason="TOKEN_NOT_FOUND",
        message=f"token {token_id!r} not found",
        metadata={"token_id": token_id, "field": "token_id"},
    )


def last_operator_token(token_id: str) -> FailedPrecondition:
    """FAILED_PRECONDITION (LAST_OPERATOR_TOKEN): revoking ``token_id`` would leave no operator token."""
    return FailedPrecondition(
        reason="LAST_OPERATOR_TOKEN",
        message=f"token {token_id!r} is the last operator token that is not revoked; nothing changed",
        metadata={"token_id": token_id, "field": "token_id"},
    )

"""Opaque page tokens over a keyset cursor.

A token carries the last row's sort key, a hash of the query it belongs to (filters and the
caller's tenant) and an issue time, HMAC-SHA256 signed with a server-wide key and base64url
encoded. The server re-derives the query hash on every call, so a token replayed with other
filters or by another tenant is INVALID_ARGUMENT; a token never authorizes anything by itself.

Every list orders by an immutable key with a unique tiebreaker: allocations and operations by
(create time, id), newest first, so rows inserted while a client pages land before its cursor;
nodes and tenants by id; a node's events, and usage events, oldest first by sequence or by
(event time, id). Every row that exists for the whole traversal is returned exactly once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from services.clock import now_us
from services.errors import InvalidArgument
from services.store.tx import Sql

VERSION = 1
TOKEN_TTL_US = 3 * 24 * 3600 * 1_000_000
_MAC_BYTES = 32
MAX_TOKEN_LENGTH = 1024

R = TypeVar("R")


@dataclass(frozen=True)
class Cursor:
    """Where the previous page ended: the last row's sort key."""

    created_us: int
    last_id: str


def cut_page(rows: list[R], size: int, key: Callable[[R], Cursor]) -> tuple[list[R], Cursor | None]:
    """A page read with one row too many (``limit=size + 1``): its first ``size`` rows, and the
    cursor after the last of them, ``key`` of that row, when the extra row says another page
    follows (None on the last page)."""
    if len(rows) <= size:
        return rows, None
    page = rows[:size]
    return page, key(page[-1])


def newest_first(select: str, id_column: str, filters: Mapping[str, Any], *, cursor: Cursor | None, limit: int) -> Sql:
    """One page of ``select`` (``SELECT ... FROM table``) newest first by (created_us,
    ``id_column``), keeping rows whose columns equal ``filters`` (a None value filters
    nothing) and starting after ``cursor``."""
    where: list[str] = ["TRUE"]
    params: dict[str, Any] = {"limit": limit}
    for column, value in filters.items():
        if value is not None:
            where.append(f"{column} = :f_{column}")
            params[f"f_{column}"] = value
    if cursor is not None:
        where.append(f"(created_us, {id_column}) < (:after_us, :after_id)")
        params.update(after_us=cursor.created_us, after_id=cursor.last_id)
    return Sql(f"{select} WHERE {' AND '.join(where)} ORDER BY created_us DESC, {id_column} DESC LIMIT :limit", params)


def query_hash(scope: Mapping[str, str | int]) -> str:
    """A stable digest of everything that defines a listing besides the page size."""
    canonical = json.dumps(dict(scope), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


class PageTokens:
    """Signs and verifies page tokens with one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("page token key must be at least 32 bytes")
        self._key = key

    def encode(self, cursor: Cursor, scope: Mapping[str, str | int]) -> str:
        """A signed token for the page after ``cursor``; ``decode`` takes it back for the same ``scope`` only."""
        payload = json.dumps(
            {"v": VERSION, "t": cursor.created_us, "id": cursor.last_id, "q": query_hash(scope), "iat": now_us()},
            separators=(",", ":"),
        ).encode()
        mac = hmac.new(self._key, payload, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac + payload).decode().rstrip("=")

    def next_token(self, after: Cursor | None, scope: Mapping[str, str | int]) -> str:
        """The token of the page after ``after`` (``encode``), or "" when there is none: the last page."""
        return "" if after is None else self.encode(after, scope)

    def decode(self, token: str, scope: Mapping[str, str | int], *, field_path: str = "page_token") -> Cursor | None:
        """The cursor of ``token``, None for an empty token; INVALID_ARGUMENT if it is not ours,
        was tampered with, has expired or belongs to another query."""
        if not token:
            return None

        def bad(why: str) -> InvalidArgument:
            return InvalidArgument.for_field(field_path, why, reason="INVALID_PAGE_TOKEN")

        if len(token) > MAX_TOKEN_LENGTH:
            raise bad("is too long to be a page token")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raise bad("is not a page token of this server") from None
        # The decoder skips characters outside the alphabet and ignores spare bits: only the
        # exact string ``encode`` made is the token, not another that decodes to the same bytes.
        if base64.urlsafe_b64encode(raw).decode().rstrip("=") != token:
            raise bad("is not a page token of this server")
        mac, payload = raw[:_MAC_BYTES], raw[_MAC_BYTES:]
        expected = hmac.new(self._key, payload, hashlib.sha256).digest()
        if len(mac) != _MAC_BYTES or not hmac.compare_digest(mac, expected):
            raise bad("is not a page token of this server (bad signature)")
        try:
            fields = json.loads(payload)
            version, created_us, last_id = fields["v"], fields["t"], fields["id"]
            issued, scope_hash = fields["iat"], fields["q"]
        except (ValueError, KeyError, TypeError):
            raise bad("is malformed") from None
        if version != VERSION or not isinstance(created_us, int) or not isinstance(last_id, str):
            raise bad("has an unsupported version")
        if scope_hash != query_hash(scope):
            raise bad("belongs to a listing with other filters or another caller")
        if not isinstance(issued, int) or now_us() - issued > TOKEN_TTL_US:
            raise bad("has expired; start the listing again")
        return Cursor(created_us, last_id)

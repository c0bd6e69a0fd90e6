"""Bearer tokens: ``gpc_<token id>_<secret>``, of which only SHA-256(secret) is stored.

The secret has 256 bits of entropy, so a fast hash is enough (there is nothing to brute-force)
and lookups stay cheap on every RPC. The token id is public and indexes the row.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

PREFIX = "gpc"
# A token inside any text: the prefix, the 16 hex digits of its public id, then at least one
# character of its secret. A token cut short still shows part of its secret, so it counts too;
# the id alone shows nothing. (No other text of the API has this shape: ids have no '_'.)
_IN_TEXT = re.compile(rf"{PREFIX}_([0-9A-Fa-f]{{16}})_[0-9A-Za-z_-]+")
REDACTED = "<redacted>"


@dataclass(frozen=True)
class IssuedToken:
    """A freshly minted token: the plaintext (shown once) and what gets stored."""

    token_id: str
    plaintext: str
    secret_sha256: str


def issue() -> IssuedToken:
    """Mint a token: a random public id and a 256-bit secret, of which only the digest is to be stored."""
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return IssuedToken(token_id, f"{PREFIX}_{token_id}_{secret}", _digest(secret))


def split(plaintext: str) -> tuple[str, str] | None:
    """The (token id, secret) of a well-formed token, or None."""
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def contains_secret(text: str) -> bool:
    """Whether ``text`` holds a token's secret, whole or in part (a token pasted where it does not belong)."""
    return PREFIX in text and _IN_TEXT.search(text) is not None


def redact(text: str) -> str:
    """``text`` with the secret of every token in it replaced by ``<redacted>``; each token's public id stays."""
    if PREFIX not in text:  # the common case, without a regex scan
        return text
    return _IN_TEXT.sub(rf"{PREFIX}_\1_{REDACTED}", text)


def matches(secret: str, stored_sha256: str) -> bool:
    """Constant-time comparison of a presented secret with the stored digest."""
    return hmac.compare_digest(_digest(secret), stored_sha256)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()

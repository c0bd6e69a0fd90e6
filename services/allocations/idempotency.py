"""Idempotency keys (``request_id``): the rules, with no I/O.

Scope is (tenant, method, request_id). The fingerprint is a SHA-256 over the canonical request
without its request_id: a retry must send the same request, and the same key with a different
request is refused with IDEMPOTENCY_KEY_REUSED and executes nothing.

What is recorded: the first successful result (its id), in the same transaction as the work,
so a replay after a crash or a restart still finds it. What is not: validation failures and
capacity errors (RESOURCE_EXHAUSTED), so that a retry after capacity frees up can succeed.
Keys are kept for at least ``RETENTION_HOURS``, then pruned (janitor.py): a retry after that
is a new request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from services.errors import Aborted, InvalidArgument

RETENTION_HOURS = 24


def fingerprint(method: str, fields: Mapping[str, str | int]) -> str:
    """The SHA-256 (hex) of ``method`` and the request's ``fields`` as canonical JSON."""
    canonical = json.dumps({"method": method, **fields}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def reused(request_id: str) -> InvalidArgument:
    """INVALID_ARGUMENT (IDEMPOTENCY_KEY_REUSED) on ``request_id``: the key was used for a different request."""
    error = InvalidArgument.for_field(
        "request_id",
        f"{request_id!r} was already used for a different request; use a new request_id",
        reason="IDEMPOTENCY_KEY_REUSED",
    )
    return error


def in_use(request_id: str) -> Aborted:
    """ABORTED (IDEMPOTENCY_KEY_IN_USE): a request with this key is still in progress; retrying finds its result."""
    return Aborted(
        reason="IDEMPOTENCY_KEY_IN_USE",
        message=f"a request with request_id {request_id!r} is in progress; retry it",
        metadata={"request_id": request_id},
    )

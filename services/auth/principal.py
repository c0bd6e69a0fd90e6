"""Who is calling: the role and scope resolved from a bearer token."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    """What a credential may do. Operators run the fleet; tenants use it; agents speak for one node."""

    OPERATOR = "operator"
    TENANT = "tenant"
    AGENT = "agent"


@dataclass(frozen=True)
class Principal:
    """The authenticated caller of one RPC."""

    token_id: str
    role: Role
    tenant_id: str | None = None
    node_id: str | None = None

    @property
    def actor(self) -> str:
        """How the caller appears in node events and logs."""
        if self.role is Role.TENANT:
            return f"tenant:{self.tenant_id}"
        if self.role is Role.AGENT:
            return f"agent:{self.node_id}"
        if self is CONTROL_PLANE or self.token_id == CONTROL_PLANE_ID:
            return CONTROL_PLANE_ID
        return f"operator:{self.token_id}"


def tenant_scope(principal: Principal) -> str | None:
    """The tenant a caller is confined to, or None for operators and agents (not tenant-bound)."""
    return principal.tenant_id if principal.role is Role.TENANT else None


def lister(principal: Principal) -> str:
    """Whose listing a page token continues, in its scope: a tenant by its id, any other caller by
    its role (operators share their listings, as do agents)."""
    return principal.tenant_id or f"role:{principal.role}"


CONTROL_PLANE_ID = "control-plane"
# The control plane itself, acting on its own (the releaser, later the reconciler).
CONTROL_PLANE = Principal(token_id=CONTROL_PLANE_ID, role=Role.OPERATOR)

_current: contextvars.ContextVar[Principal] = contextvars.ContextVar("gpucloud_principal")


def current_principal() -> Principal:
    """The caller of the RPC being served; set by the auth interceptor before any handler runs."""
    return _current.get()


def set_current_principal(principal: Principal) -> contextvars.Token[Principal]:
    """Make ``principal`` the caller of the RPC being served (the interceptor does); returns the token to reset it."""
    return _current.set(principal)

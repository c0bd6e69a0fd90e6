"""Listings by tenant (allocations, usage events): a tenant reads only its own rows, an operator
those of the tenant it names or of every tenant."""

from __future__ import annotations

from dataclasses import dataclass

from services.auth.principal import Principal, lister, tenant_scope


@dataclass(frozen=True)
class TenantList:
    """Whose rows one list request reads: from its caller and the tenant it names ("" for none)."""

    caller: Principal
    named: str

    @property
    def tenant_id(self) -> str | None:
        """The tenant whose rows are read: a tenant's own, whether or not it names itself; for
        an operator the one it names, or None for every tenant."""
        return tenant_scope(self.caller) or self.named or None

    @property
    def of_another_tenant(self) -> bool:
        """A tenant named another tenant. It reads an empty list, never an error that would
        confirm the other tenant exists."""
        own = tenant_scope(self.caller)
        return own is not None and bool(self.named) and self.named != own

    @property
    def tenant_must_exist(self) -> bool:
        """The tenant, if any, was named by an operator: NOT_FOUND when there is none (the parent
        of a list, as in AIP-132), rather than an empty list that hides a typo."""
        return tenant_scope(self.caller) is None

    def scope(self, list_name: str, **filters: str | int) -> dict[str, str | int]:
        """The scope of the list's page tokens: the list, the caller, the tenant read (so that a
        token from a tenant's request naming itself continues the one naming none) and
        ``filters``."""
        return {"list": list_name, "caller": lister(self.caller), "tenant_id": self.tenant_id or "", **filters}

"""Bounds on concurrent calls, so that no caller can take the server from everyone else.

A call is admitted before its handler runs and counted until the handler ends. Three bounds
hold per tenant, on all of its tokens together (the tenant is the unit that is isolated and
billed; a tenant holding several tokens for a rotation must not get a share per token):

- calls in flight, whatever the method;
- long polls (``WaitOperation``), which hold a call for up to their timeout;
- heavy reads (an invoice, a metrics query), which read far more than a lookup.

Operators and agents run the fleet and are not held to a tenant's bounds. One more bound holds
for every caller's calls together, so that a burst is refused instead of queueing until every
deadline has passed; operators and agents may go a quarter past it, so the fleet can still be
run and looked at while tenants are refused.

A call beyond a bound is answered at once with RESOURCE_EXHAUSTED, a stable reason and a
RetryInfo; it was not run, so any call may be sent again after the delay. The refusals are
logged as a ``calls_refused`` warning, at most once a second per reason, with their count.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum

import structlog

from services.auth.principal import Principal, Role
from services.errors import ResourceExhausted

log = structlog.get_logger(__name__)

LONG_POLLS = frozenset({"/google.longrunning.Operations/WaitOperation"})
HEAVY_READS = frozenset(
    {
        "/gpucloud.v1.BillingService/GetInvoice",
        "/gpucloud.v1.MetricsService/Query",
        "/gpucloud.v1.MetricsService/QueryRange",
    }
)
# How far past ``calls_in_flight`` operators and agents are still admitted, as a fraction of it.
FLEET_HEADROOM = 0.25
# Refusals are summed into one log line per reason per this many seconds.
LOG_EVERY_SECONDS = 1.0


class Reason(StrEnum):
    """Why a call was refused: the ErrorInfo reason a caller sees."""

    TOO_MANY_CALLS = "TOO_MANY_CALLS"
    TOO_MANY_WAITS = "TOO_MANY_WAITS"
    TOO_MANY_HEAVY_CALLS = "TOO_MANY_HEAVY_CALLS"
    SERVER_OVERLOADED = "SERVER_OVERLOADED"


@dataclass(frozen=True)
class CallLimits:
    """The bounds, each a count of calls in flight at once (docs/api.md states the defaults)."""

    tenant_calls: int = 64
    tenant_waits: int = 32
    tenant_heavy_calls: int = 4
    calls_in_flight: int = 1024
    # What a refused caller is told to wait before it tries again (RetryInfo).
    retry_after_seconds: float = 1.0

    def __post_init__(self) -> None:
        """ValueError for a bound under 1 (it would refuse every call) or a negative delay."""
        for name in ("tenant_calls", "tenant_waits", "tenant_heavy_calls", "calls_in_flight"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if not self.retry_after_seconds >= 0:
            raise ValueError(f"retry_after_seconds must be 0 or more, not {self.retry_after_seconds}")


class CallLimiter:
    """Counts the calls in flight and refuses those beyond a bound (see the module docstring).

    Only the event loop's thread touches the counts, between awaits, so they need no lock.
    """

    def __init__(self, limits: CallLimits) -> None:
        self.limits = limits
        self._fleet_bound = limits.calls_in_flight + int(limits.calls_in_flight * FLEET_HEADROOM)
        self._in_flight = 0
        # By (tenant, Reason): the tenant's calls counted against that bound.
        self._tenants: Counter[tuple[str, Reason]] = Counter()
        self._refused: Counter[Reason] = Counter()
        self._logged_at: dict[Reason, float] = {}

    @property
    def in_flight(self) -> int:
        """Calls admitted and not yet ended, every caller's together."""
        return self._in_flight

    @contextmanager
    def admit(self, method: str, principal: Principal) -> Iterator[None]:
        """Count the call for the block's duration; RESOURCE_EXHAUSTED (nothing counted) when it
        is beyond one of its caller's bounds or the server's."""
        tenant = principal.tenant_id if principal.role is Role.TENANT else None
        if tenant is None:
            self._check(Reason.SERVER_OVERLOADED, self._in_flight, self._fleet_bound, principal)
            keys: list[tuple[str, Reason]] = []
        else:
            keys = [(tenant, Reason.TOO_MANY_CALLS)]
            if method in LONG_POLLS:
                keys.append((tenant, Reason.TOO_MANY_WAITS))
            elif method in HEAVY_READS:
                keys.append((tenant, Reason.TOO_MANY_HEAVY_CALLS))
            # The tenant's own bounds first: a tenant at its bound is told so, not that the
            # server is busy.
            for key in keys:
                self._check(key[1], self._tenants[key], self._bound(key[1]), principal)
            self._check(Reason.SERVER_OVERLOADED, self._in_flight, self.limits.calls_in_flight, principal)
        self._in_flight += 1
        for key in keys:
            self._tenants[key] += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            for key in keys:
                left = self._tenants[key] - 1
                if left:
                    self._tenants[key] = left
                else:
                    del self._tenants[key]  # no entry per tenant that ever called

    def _bound(self, reason: Reason) -> int:
        limits = self.limits
        if reason is Reason.TOO_MANY_WAITS:
            return limits.tenant_waits
        if reason is Reason.TOO_MANY_HEAVY_CALLS:
            return limits.tenant_heavy_calls
        return limits.tenant_calls

    def _check(self, reason: Reason, count: int, bound: int, principal: Principal) -> None:
        if count < bound:
            return
        self._note_refusal(reason, bound)
        raise ResourceExhausted(
            reason=reason.value,
            message=_MESSAGES[reason].format(bound=bound, delay=self.limits.retry_after_seconds),
            metadata={"limit": str(bound), "caller": principal.tenant_id or principal.role.value},
            retry_delay=self.limits.retry_after_seconds,
        )

    def _note_refusal(self, reason: Reason, bound: int) -> None:
        """Log the refusals of ``reason``, summed over ``LOG_EVERY_SECONDS``: a flood of refused
        calls must not become a flood of warnings (each call also has its ``rpc`` line)."""
        self._refused[reason] += 1
        now = time.monotonic()
        if now - self._logged_at.get(reason, -LOG_EVERY_SECONDS) >= LOG_EVERY_SECONDS:
            log.warning(
                "calls_refused",
                reason=reason.value,
                count=self._refused.pop(reason),
                limit=bound,
                in_flight=self._in_flight,
            )
            self._logged_at[reason] = now


_MESSAGES = {
    Reason.TOO_MANY_CALLS: "this tenant has {bound} calls in flight, its bound; retry in {delay:g} s",
    Reason.TOO_MANY_WAITS: "this tenant has {bound} WaitOperation calls in flight, its bound; retry in {delay:g} s",
    Reason.TOO_MANY_HEAVY_CALLS: (
        "this tenant has {bound} invoice or metrics queries in flight, its bound; retry in {delay:g} s"
    ),
    Reason.SERVER_OVERLOADED: "the server has {bound} calls in flight, its bound; retry in {delay:g} s",
}

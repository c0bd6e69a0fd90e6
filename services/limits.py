"""Bounds on concurrent calls, so that no caller can take the server from everyone else.

A call is counted from its arrival until its handler ends, in two steps:

1. On arrival, before its token is looked up, every call counts against the server's bound on
   calls in flight plus a quarter of it (``CallLimits.most_in_flight``: the most the server ever
   runs at once). No call's role is known yet, so every call, whatever its token and whether it
   has one, is held to this: a flood of unknown tokens is refused like any other flood, and
   costs no token lookup past the bound.
2. Once its caller is known, the call also counts against its caller's bounds:

   - a tenant's, on all of its tokens together (the tenant is the unit that is isolated and
     billed; a tenant holding several tokens for a rotation must not get a share per token):
     calls in flight, long polls (``WaitOperation``, which hold a call for up to their
     timeout) and heavy reads (an invoice, a metrics query, which read far more than a
     lookup). A tenant's call must also fit within the server's bound itself, without the
     quarter: the last quarter is kept from tenants, for operators and agents to run the fleet
     and look at it while tenants are refused;
   - an agent's, per node: calls in flight, so that one node's agent cannot take the server;
     and its open streams (``STREAMS``), which are counted against the server's bound only
     while their caller is looked up: a fleet holds one stream per node for as long as it runs,
     and 10,000 of them must not leave no room for calls.

   Operators are held to no bound of their own. Calls whose token is still being looked up,
   or turns out to be unknown, may use the last quarter only for as long as the lookup lasts.

A call beyond a bound is answered at once with RESOURCE_EXHAUSTED, a stable reason and a
RetryInfo; it was not run, so any call may be sent again after the delay. The refusals are
logged as a ``calls_refused`` warning with their count, at most once a second per reason; the
count of refusals held back is logged when that second is up, whether or not more follow.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from typing import NoReturn

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
# Long-lived streams: counted per node while open, against the server's bound only until admitted.
STREAMS = frozenset({"/gpucloud.v1.AgentService/Connect"})
# How far past ``calls_in_flight`` calls not known to be a tenant's are still admitted, as a fraction of it.
FLEET_HEADROOM = 0.25
# Refusals are summed into one log line per reason per this many seconds.
LOG_EVERY_SECONDS = 1.0


class Reason(StrEnum):
    """Why a call was refused: the ErrorInfo reason a caller sees."""

    TOO_MANY_CALLS = "TOO_MANY_CALLS"
    TOO_MANY_WAITS = "TOO_MANY_WAITS"
    TOO_MANY_HEAVY_CALLS = "TOO_MANY_HEAVY_CALLS"
    TOO_MANY_STREAMS = "TOO_MANY_STREAMS"
    SERVER_OVERLOADED = "SERVER_OVERLOADED"


@dataclass(frozen=True)
class CallLimits:
    """The bounds, each a count of calls in flight at once (docs/api.md states the defaults)."""

    tenant_calls: int = 64
    tenant_waits: int = 32
    tenant_heavy_calls: int = 4
    agent_calls: int = 16
    # Two, not one: an agent that reconnects is let in before the server has noticed that its
    # previous stream broke.
    agent_streams: int = 2
    calls_in_flight: int = 1024
    # What a refused caller is told to wait before it tries again (RetryInfo).
    retry_after_seconds: float = 1.0

    def __post_init__(self) -> None:
        """ValueError for a bound under 1 (it would refuse every call) or a negative delay."""
        names = (
            "tenant_calls",
            "tenant_waits",
            "tenant_heavy_calls",
            "agent_calls",
            "agent_streams",
            "calls_in_flight",
        )
        for name in names:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if not self.retry_after_seconds >= 0:
            raise ValueError(f"retry_after_seconds must be 0 or more, not {self.retry_after_seconds}")

    @property
    def most_in_flight(self) -> int:
        """The most calls the server runs at once: its bound and the quarter past it kept from tenants."""
        return self.calls_in_flight + int(self.calls_in_flight * FLEET_HEADROOM)


# A caller's count against one of its bounds: (the tenant or node id, Reason, is it a node).
_Key = tuple[str, Reason, bool]
# What arrive() counts a call under before its caller is known: nothing of a caller's.
NO_KEYS: tuple[_Key, ...] = ()


class CallLimiter:
    """Counts the calls in flight and refuses those beyond a bound (see the module docstring).

    A call is ``arrive``d, then ``admit``ted once its caller is known, and ``leave``s with the
    keys ``admit`` returned (``NO_KEYS`` when it never got that far), whatever happens. Only the
    event loop's thread touches the counts, between awaits, so they need no lock. ``close``
    logs the refusals not logged yet; the server calls it when it stops.
    """

    def __init__(self, limits: CallLimits, *, log_every_seconds: float = LOG_EVERY_SECONDS) -> None:
        self.limits = limits
        self._log_every = log_every_seconds
        self._most_in_flight = limits.most_in_flight
        self._in_flight = 0
        self._callers: dict[_Key, int] = {}
        # The (Reason, bound) pairs of a caller's own bounds, by method and role: worked out
        # once per pair, since every call pays for this.
        self._bounds: dict[tuple[str, Role], tuple[tuple[Reason, int], ...]] = {}
        # Refusals not logged yet, by reason, with the bound of the latest one.
        self._refused: Counter[Reason] = Counter()
        self._refused_at_bound: dict[Reason, int] = {}
        self._logged_at: dict[Reason, float] = {}
        self._flushes: dict[Reason, asyncio.TimerHandle] = {}

    @property
    def in_flight(self) -> int:
        """Calls counted and not yet ended, every caller's together, known or not."""
        return self._in_flight

    def arrive(self) -> None:
        """Count a call from before its caller is known; RESOURCE_EXHAUSTED (SERVER_OVERLOADED,
        nothing counted) when the server already runs ``most_in_flight`` calls."""
        if self._in_flight >= self._most_in_flight:
            self._refuse(Reason.SERVER_OVERLOADED, self._most_in_flight, caller=None)
        self._in_flight += 1

    def admit(self, method: str, principal: Principal) -> tuple[_Key, ...]:
        """Count an arrived call against the bounds of ``principal`` (now known) for ``method``;
        the keys to hand to ``leave``. RESOURCE_EXHAUSTED, nothing more counted, when the call
        is beyond one of them (it still ``leave``s with ``NO_KEYS``)."""
        role = principal.role
        if role is Role.TENANT:
            caller, subject, node = principal.tenant_id or principal.token_id, "this tenant", False
        elif role is Role.AGENT:
            caller, subject, node = principal.node_id or principal.token_id, "this node's agent", True
        else:
            return NO_KEYS  # an operator: the bound on arrival is its only one
        bounds = self._bounds.get((method, role))
        if bounds is None:
            bounds = self._bounds[(method, role)] = self._bounds_of(method, role)
        callers = self._callers
        keys = tuple((caller, reason, node) for reason, _ in bounds)
        # The caller's own bounds first: a caller at its bound is told so, not that the server is busy.
        for key, (reason, bound) in zip(keys, bounds, strict=True):
            if callers.get(key, 0) >= bound:
                self._refuse(reason, bound, principal.actor if node else caller, subject)
        # This call is counted already: the others in flight must leave it room within the bound.
        if not node and self._in_flight - 1 >= self.limits.calls_in_flight:
            self._refuse(Reason.SERVER_OVERLOADED, self.limits.calls_in_flight, caller, subject)
        for key in keys:
            callers[key] = callers.get(key, 0) + 1
        return keys

    def leave(self, keys: tuple[_Key, ...]) -> None:
        """Let go of an arrived call and of the caller's counts ``admit`` returned for it."""
        self._in_flight -= 1
        self.release(keys)

    def release(self, keys: tuple[_Key, ...]) -> None:
        """Let go of the caller's counts ``admit`` returned: a stream's, when it ends (it left
        the server's count once admitted)."""
        callers = self._callers
        for key in keys:
            left = callers[key] - 1
            if left:
                callers[key] = left
            else:
                del callers[key]  # no entry per caller that ever called

    def close(self) -> None:
        """Log the refusals not logged yet, and stop the timers that would have."""
        for reason in list(self._refused):
            self._log_refusals(reason)
        for handle in self._flushes.values():
            handle.cancel()
        self._flushes.clear()

    def _bounds_of(self, method: str, role: Role) -> tuple[tuple[Reason, int], ...]:
        limits = self.limits
        if role is Role.AGENT:
            if method in STREAMS:
                return ((Reason.TOO_MANY_STREAMS, limits.agent_streams),)
            return ((Reason.TOO_MANY_CALLS, limits.agent_calls),)
        if method in LONG_POLLS:
            return (Reason.TOO_MANY_CALLS, limits.tenant_calls), (Reason.TOO_MANY_WAITS, limits.tenant_waits)
        if method in HEAVY_READS:
            return (Reason.TOO_MANY_CALLS, limits.tenant_calls), (
                Reason.TOO_MANY_HEAVY_CALLS,
                limits.tenant_heavy_calls,
            )
        return ((Reason.TOO_MANY_CALLS, limits.tenant_calls),)

    def _refuse(self, reason: Reason, bound: int, caller: str | None, subject: str = "") -> NoReturn:
        """RESOURCE_EXHAUSTED for a call that reached ``bound``; ``caller`` (None: not known yet)
        goes into the error's metadata, ``subject`` ("this tenant") into its message."""
        self._note_refusal(reason, bound)
        # No caller is named for a call refused on arrival: who sent it is not known yet.
        metadata = {"limit": str(bound)} if caller is None else {"limit": str(bound), "caller": caller}
        raise ResourceExhausted(
            reason=reason.value,
            message=_MESSAGES[reason].format(subject=subject, bound=bound, delay=self.limits.retry_after_seconds),
            metadata=metadata,
            retry_delay=self.limits.retry_after_seconds,
        )

    def _note_refusal(self, reason: Reason, bound: int) -> None:
        """Count a refusal into the next ``calls_refused`` line of its reason: at once when none was
        logged in the last ``log_every_seconds``, else when that time is up. A flood of refused
        calls must not become a flood of warnings (each call also has its ``rpc`` line), and the
        last refusals of a burst must still be logged when no more follow."""
        self._refused[reason] += 1
        self._refused_at_bound[reason] = bound
        wait = self._logged_at.get(reason, -self._log_every) + self._log_every - time.monotonic()
        if wait <= 0:
            self._log_refusals(reason)
        elif reason not in self._flushes:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # outside a loop (a script's own limiter): the next refusal or close() logs them
            self._flushes[reason] = loop.call_later(wait, self._log_refusals, reason)

    def _log_refusals(self, reason: Reason) -> None:
        handle = self._flushes.pop(reason, None)
        if handle is not None:
            handle.cancel()  # a no-op when it is the timer running this
        count = self._refused.pop(reason, 0)
        if not count:
            return
        log.warning(
            "calls_refused",
            reason=reason.value,
            count=count,
            limit=self._refused_at_bound[reason],
            in_flight=self._in_flight,
        )
        self._logged_at[reason] = time.monotonic()


_MESSAGES = {
    Reason.TOO_MANY_CALLS: "{subject} has {bound} calls in flight, its bound; retry in {delay:g} s",
    Reason.TOO_MANY_WAITS: "this tenant has {bound} WaitOperation calls in flight, its bound; retry in {delay:g} s",
    Reason.TOO_MANY_HEAVY_CALLS: (
        "this tenant has {bound} invoice or metrics queries in flight, its bound; retry in {delay:g} s"
    ),
    Reason.TOO_MANY_STREAMS: "{subject} has {bound} streams open, its bound; retry in {delay:g} s",
    Reason.SERVER_OVERLOADED: "the server has {bound} calls in flight, its bound; retry in {delay:g} s",
}

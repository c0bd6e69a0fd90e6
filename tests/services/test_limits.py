"""CallLimiter: which bound a call counts against, and that every admitted call is let go."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
import structlog

from services.auth.principal import Principal, Role
from services.errors import ResourceExhausted
from services.limits import HEAVY_READS, LONG_POLLS, CallLimiter, CallLimits

ACME = Principal(token_id="t-acme", role=Role.TENANT, tenant_id="acme")
ACME_OTHER_TOKEN = Principal(token_id="t-acme-2", role=Role.TENANT, tenant_id="acme")
GLOBEX = Principal(token_id="t-globex", role=Role.TENANT, tenant_id="globex")
OPERATOR = Principal(token_id="t-op", role=Role.OPERATOR)
AGENT = Principal(token_id="t-agent", role=Role.AGENT, node_id="node-1")
GET = "/gpucloud.v1.AllocationService/GetAllocation"
WAIT = next(iter(LONG_POLLS))
INVOICE = "/gpucloud.v1.BillingService/GetInvoice"


def refusal(limiter: CallLimiter, method: str, principal: Principal) -> ResourceExhausted:
    with pytest.raises(ResourceExhausted) as raised, limiter.admit(method, principal):
        pass
    return raised.value


def test_a_tenants_bound_holds_across_its_tokens_and_spares_others() -> None:
    limiter = CallLimiter(CallLimits(tenant_calls=2, retry_after_seconds=0.5))
    with ExitStack() as held:
        held.enter_context(limiter.admit(GET, ACME))
        held.enter_context(limiter.admit(GET, ACME_OTHER_TOKEN))
        refused = refusal(limiter, GET, ACME)
        assert (refused.reason, refused.retry_delay) == ("TOO_MANY_CALLS", 0.5)
        assert refused.metadata == {"limit": "2", "caller": "acme"}
        with limiter.admit(GET, GLOBEX), limiter.admit(GET, OPERATOR), limiter.admit(GET, AGENT):
            assert limiter.in_flight == 5
    assert limiter.in_flight == 0
    with limiter.admit(GET, ACME):  # slots come back
        pass


def test_long_polls_and_heavy_reads_have_bounds_of_their_own() -> None:
    assert INVOICE in HEAVY_READS
    limiter = CallLimiter(CallLimits(tenant_calls=10, tenant_waits=1, tenant_heavy_calls=1))
    with limiter.admit(WAIT, ACME), limiter.admit(INVOICE, ACME):
        assert refusal(limiter, WAIT, ACME).reason == "TOO_MANY_WAITS"
        assert refusal(limiter, "/gpucloud.v1.MetricsService/QueryRange", ACME).reason == "TOO_MANY_HEAVY_CALLS"
        with limiter.admit(GET, ACME), limiter.admit(WAIT, OPERATOR), limiter.admit(INVOICE, OPERATOR):
            pass


def test_the_servers_bound_refuses_tenants_first_and_logs_refusals_summed() -> None:
    limiter = CallLimiter(CallLimits(calls_in_flight=4))
    with ExitStack() as held, structlog.testing.capture_logs() as logs:
        for principal in (ACME, GLOBEX, OPERATOR, AGENT):
            held.enter_context(limiter.admit(GET, principal))
        for _ in range(3):
            assert refusal(limiter, GET, GLOBEX).reason == "SERVER_OVERLOADED"
        # Operators and agents may go a quarter past it: one more here.
        held.enter_context(limiter.admit(GET, OPERATOR))
        assert refusal(limiter, GET, AGENT).reason == "SERVER_OVERLOADED"
    assert [(e["event"], e["reason"], e["count"]) for e in logs] == [("calls_refused", "SERVER_OVERLOADED", 1)]


def test_a_failing_call_gives_its_slot_back() -> None:
    limiter = CallLimiter(CallLimits(tenant_calls=1))
    with pytest.raises(RuntimeError), limiter.admit(GET, ACME):
        raise RuntimeError("handler failed")
    with limiter.admit(GET, ACME):
        assert limiter.in_flight == 1


@pytest.mark.parametrize("field", ["tenant_calls", "tenant_waits", "tenant_heavy_calls", "calls_in_flight"])
def test_a_bound_under_one_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        CallLimits(**{field: 0})  # type: ignore[arg-type]

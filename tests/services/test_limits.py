"""CallLimiter: which bound a call counts against, and that every admitted call is let go."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
import structlog

from services.auth.principal import Principal, Role
from services.errors import ResourceExhausted
from services.limits import HEAVY_READS, LONG_POLLS, NO_KEYS, CallLimiter, CallLimits
from services.server import grpc_pending_calls
from tests.conftest import until

ACME = Principal(token_id="t-acme", role=Role.TENANT, tenant_id="acme")
ACME_OTHER_TOKEN = Principal(token_id="t-acme-2", role=Role.TENANT, tenant_id="acme")
GLOBEX = Principal(token_id="t-globex", role=Role.TENANT, tenant_id="globex")
OPERATOR = Principal(token_id="t-op", role=Role.OPERATOR)
AGENT = Principal(token_id="t-agent", role=Role.AGENT, node_id="node-1")
AGENT_NEW_TOKEN = Principal(token_id="t-agent-2", role=Role.AGENT, node_id="node-1")
OTHER_AGENT = Principal(token_id="t-agent-3", role=Role.AGENT, node_id="node-2")
# A tenant and a node may share an id: their bounds are still their own.
NODE_NAMED_ACME = Principal(token_id="t-agent-4", role=Role.AGENT, node_id="acme")
GET = "/gpucloud.v1.AllocationService/GetAllocation"
WAIT = next(iter(LONG_POLLS))
INVOICE = "/gpucloud.v1.BillingService/GetInvoice"


@contextmanager
def call(limiter: CallLimiter, method: str, principal: Principal | None) -> Iterator[None]:
    """A call as the interceptor makes it: counted on arrival, then as its caller's once known
    (None: a caller whose token is still being looked up)."""
    limiter.arrive()
    counted = NO_KEYS
    try:
        if principal is not None:
            counted = limiter.admit(method, principal)
        yield
    finally:
        limiter.leave(counted)


def refusal(limiter: CallLimiter, method: str, principal: Principal | None) -> ResourceExhausted:
    with pytest.raises(ResourceExhausted) as raised, call(limiter, method, principal):
        pass
    return raised.value


def test_a_tenants_bound_holds_across_its_tokens_and_spares_others() -> None:
    limiter = CallLimiter(CallLimits(tenant_calls=2, retry_after_seconds=0.5))
    with ExitStack() as held:
        held.enter_context(call(limiter, GET, ACME))
        held.enter_context(call(limiter, GET, ACME_OTHER_TOKEN))
        refused = refusal(limiter, GET, ACME)
        assert (refused.reason, refused.retry_delay) == ("TOO_MANY_CALLS", 0.5)
        assert refused.metadata == {"limit": "2", "caller": "acme"}
        assert refused.message.startswith("this tenant has 2 calls in flight")
        with call(limiter, GET, GLOBEX), call(limiter, GET, OPERATOR), call(limiter, GET, AGENT):
            assert limiter.in_flight == 5
    assert limiter.in_flight == 0
    with call(limiter, GET, ACME):  # slots come back
        pass


def test_long_polls_and_heavy_reads_have_bounds_of_their_own() -> None:
    assert INVOICE in HEAVY_READS
    limiter = CallLimiter(CallLimits(tenant_calls=10, tenant_waits=1, tenant_heavy_calls=1))
    with call(limiter, WAIT, ACME), call(limiter, INVOICE, ACME):
        assert refusal(limiter, WAIT, ACME).reason == "TOO_MANY_WAITS"
        assert refusal(limiter, "/gpucloud.v1.MetricsService/QueryRange", ACME).reason == "TOO_MANY_HEAVY_CALLS"
        with call(limiter, GET, ACME), call(limiter, WAIT, OPERATOR), call(limiter, INVOICE, OPERATOR):
            pass


def test_an_agents_bound_holds_per_node_across_its_tokens() -> None:
    limiter = CallLimiter(CallLimits(agent_calls=2, tenant_calls=1))
    with call(limiter, GET, AGENT), call(limiter, GET, AGENT_NEW_TOKEN):
        refused = refusal(limiter, GET, AGENT)
        assert (refused.reason, refused.metadata) == ("TOO_MANY_CALLS", {"limit": "2", "caller": "agent:node-1"})
        assert refused.message.startswith("this node's agent has 2 calls in flight")
        # Another node's agent, a tenant named like the node, and operators are not held to it.
        with call(limiter, GET, OTHER_AGENT), call(limiter, GET, ACME), call(limiter, GET, OPERATOR):
            pass
    with call(limiter, GET, AGENT), call(limiter, GET, NODE_NAMED_ACME), call(limiter, GET, ACME):
        assert limiter.in_flight == 3


def test_every_call_counts_from_its_arrival_before_its_caller_is_known() -> None:
    """Callers not known yet (their token is being looked up, or unknown) are counted, up to the
    most the server runs; past it a call is refused before it is looked up, naming no caller."""
    limiter = CallLimiter(CallLimits(calls_in_flight=4))
    assert limiter.limits.most_in_flight == 5
    with ExitStack() as held:
        for _ in range(5):
            held.enter_context(call(limiter, GET, None))
        refused = refusal(limiter, GET, None)
        assert (refused.reason, refused.metadata) == ("SERVER_OVERLOADED", {"limit": "5"})
        assert refusal(limiter, GET, OPERATOR).reason == "SERVER_OVERLOADED"
    assert limiter.in_flight == 0


def test_the_last_quarter_of_the_servers_bound_is_kept_from_tenants() -> None:
    limiter = CallLimiter(CallLimits(calls_in_flight=4))
    with ExitStack() as held, structlog.testing.capture_logs() as logs:
        for principal in (ACME, GLOBEX, OPERATOR, AGENT):
            held.enter_context(call(limiter, GET, principal))
        for _ in range(3):
            refused = refusal(limiter, GET, GLOBEX)
            assert (refused.reason, refused.metadata) == ("SERVER_OVERLOADED", {"limit": "4", "caller": "globex"})
        # Operators and agents may go a quarter past it: one more here.
        held.enter_context(call(limiter, GET, OPERATOR))
        assert refusal(limiter, GET, AGENT).reason == "SERVER_OVERLOADED"
        assert limiter.in_flight == 5
    # The first refusal is logged at once; the others of that second when the limiter closes.
    assert [(e["event"], e["reason"], e["count"]) for e in logs] == [("calls_refused", "SERVER_OVERLOADED", 1)]
    with structlog.testing.capture_logs() as logs:
        limiter.close()
    assert [(e["event"], e["reason"], e["count"], e["limit"]) for e in logs] == [
        ("calls_refused", "SERVER_OVERLOADED", 3, 5)
    ]


async def test_the_refusals_held_back_are_logged_when_their_second_is_up() -> None:
    """The last refusals of a burst are logged, summed, once the interval after the line
    before them has passed, even when no call follows them."""
    limiter = CallLimiter(CallLimits(tenant_calls=1), log_every_seconds=0.2)
    with structlog.testing.capture_logs() as logs:
        with call(limiter, GET, ACME):
            for _ in range(4):
                refusal(limiter, GET, ACME)
        assert [e["count"] for e in logs] == [1]
        await until(lambda: len(logs) == 2)
        assert [(e["event"], e["reason"], e["count"]) for e in logs] == [
            ("calls_refused", "TOO_MANY_CALLS", 1),
            ("calls_refused", "TOO_MANY_CALLS", 3),
        ]
        limiter.close()  # nothing is left to log
    assert len(logs) == 2


def test_a_failing_call_gives_its_slot_back() -> None:
    limiter = CallLimiter(CallLimits(tenant_calls=1))
    with pytest.raises(RuntimeError), call(limiter, GET, ACME):
        raise RuntimeError("handler failed")
    with pytest.raises(RuntimeError), call(limiter, GET, None):
        raise RuntimeError("authentication failed")
    with call(limiter, GET, ACME):
        assert limiter.in_flight == 1


def test_a_call_refused_at_its_callers_bound_gives_its_arrival_slot_back() -> None:
    limiter = CallLimiter(CallLimits(tenant_calls=1))
    with call(limiter, GET, ACME):
        refusal(limiter, GET, ACME)
        assert limiter.in_flight == 1
    assert limiter.in_flight == 0


@pytest.mark.parametrize(
    "field", ["tenant_calls", "tenant_waits", "tenant_heavy_calls", "agent_calls", "calls_in_flight"]
)
def test_a_bound_under_one_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        CallLimits(**{field: 0})


def test_grpcs_queue_of_calls_not_taken_yet_is_sized_from_the_servers_bound() -> None:
    """Several times the most calls the server runs, and never under gRPC's own defaults."""
    assert grpc_pending_calls(CallLimits()) == (4 * 1280, 8 * 1280)
    assert grpc_pending_calls(CallLimits(calls_in_flight=10)) == (1_000, 3_000)

"""``AsyncClient``: the typed asyncio client of the gpucloud API.

Every call carries a deadline (the client's ``timeout``, 30 s by default, or the call's own
``timeout=``) and the bearer token. Calls that are safe to repeat are retried on UNAVAILABLE,
and on CANCELLED from the server (what a server that begins a graceful stop answers a call
arriving then), with capped exponential back-off and jitter until that deadline, so a server
restart shorter than the deadline fails none of them. ``create_allocation`` gets a ``request_id``
automatically (a UUIDv7: clients/request_ids.py) so that it is safe to repeat too, and is also
retried on ABORTED, which the server answers while another call with the same key is running;
its errors carry that key (``error.request_id``) for a retry of the caller's own. Any call the
server refused unrun at a bound on concurrent calls (RESOURCE_EXHAUSTED with a RetryInfo) is
sent again after the delay it advises, within the same deadline. Creating
tenants and tokens, and node state transitions, are not retried: a repeat after a lost reply
would be refused or act twice. Revoking a token is idempotent, and retried.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import grpc
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2

from clients import billing, convert, instants, listings, metrics, models
from clients.errors import GpucloudError, InvalidValueError, from_rpc_error
from clients.request_ids import new_request_id
from gpucloud.v1 import (
    allocation_pb2,
    allocation_pb2_grpc,
    billing_pb2,
    billing_pb2_grpc,
    metrics_pb2,
    metrics_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    tenant_pb2,
    tenant_pb2_grpc,
    token_pb2,
    token_pb2_grpc,
)

R = TypeVar("R")

DEFAULT_TIMEOUT = 30.0
# CANCELLED reaches a caller as an AioRpcError only from the other side (a call the caller
# cancels, or whose channel it closes, raises asyncio.CancelledError; a deadline is
# DEADLINE_EXCEEDED). A grpc.aio server sends it for a call that arrives as it begins a graceful
# stop, which it drops unrun; a proxy might send it after the call ran. Either way the calls
# retried on it are those safe to repeat, as on UNAVAILABLE, which may also come after the work.
_SAFE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
_SAFE_WITH_KEY = _SAFE | {grpc.StatusCode.ABORTED}
_NEVER: frozenset[grpc.StatusCode] = frozenset()
# The trailing metadata a create carries when it was answered from its key's record
# (services/allocations/servicer.py sets it).
REPLAYED_KEY = "idempotent-replayed"
# gRPC's own reconnect back-off grows to 120 s: after a restart of a minute, a channel would
# wait up to a minute more before it tried the server again, failing every retry at once
# meanwhile. Capped like the retries, it notices the server back within about a second.
_CHANNEL_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000))
# The largest answer the client takes: the server's bound on a metrics query's answer (16 MiB,
# docs/api.md), so that it never refuses an answer the server may send. gRPC's default is 4 MiB.
DEFAULT_MAX_RECEIVE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class RetryPolicy:
    """Capped exponential back-off with full jitter, retrying until the call's deadline.

    ``attempts`` bounds the tries in all, the first included; None (the default) tries as long as
    the deadline leaves time for the next back-off, so a server restart shorter than the deadline
    fails no call that is safe to repeat. With None, both back-offs must be more than 0: a zero
    back-off would retry in a tight loop until the deadline. A finite ``attempts`` allows 0.
    """

    attempts: int | None = None
    initial_backoff: float = 0.05
    max_backoff: float = 1.0

    def __post_init__(self) -> None:
        """Refuse a policy that could never try, that sleeps a negative or endless time, or that
        would retry without pause until the deadline (no ``attempts`` and a back-off of 0)."""
        if self.attempts is not None and self.attempts < 1:
            raise InvalidValueError("attempts", f"attempts must be at least 1 or None, not {self.attempts}")
        for name in ("initial_backoff", "max_backoff"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InvalidValueError(name, f"{name} must be a finite number of seconds >= 0, not {value!r}")
            if self.attempts is None and value == 0:
                # Thousands of tries a second against a server that is down, until the deadline.
                raise InvalidValueError(
                    name, f"{name} must be more than 0 seconds when attempts is None (retry until the deadline)"
                )

    def delay(self, retry: int) -> float:
        """Seconds to sleep before retry number ``retry`` (1-based): random, up to
        ``initial_backoff * 2**(retry - 1)`` capped at ``max_backoff``."""
        # The exponent stops at 62: the cap applies long before, and 2.0**1024 is no float.
        return random.uniform(0, min(self.max_backoff, self.initial_backoff * 2 ** min(retry - 1, 62)))

    def gives_up_after(self, tries: int) -> bool:
        """Whether ``tries`` tries are all the policy allows."""
        return self.attempts is not None and tries >= self.attempts


@dataclass(frozen=True)
class CreatedTenant:
    """A new tenant and its first token (shown only once), with the token's public id to revoke it by."""

    tenant: models.Tenant
    token: str
    token_id: str


# googleapis-common-protos ships no types for its grpc stubs: the stub class, given a type here.
_operations_stub: Callable[[grpc.aio.Channel], Any] = operations_pb2_grpc.OperationsStub


@dataclass(frozen=True, slots=True)
class _Stubs:
    """A channel and one stub per service on it, made together on first use. A stub builds a
    callable for every method of its service, a cost that a stub made per call would pay on
    every call."""

    channel: grpc.aio.Channel
    # The loop the channel was made on, the only one it works on.
    loop: asyncio.AbstractEventLoop
    tenants: tenant_pb2_grpc.TenantServiceStub
    tokens: token_pb2_grpc.TokenServiceStub
    nodes: node_pb2_grpc.NodeServiceStub
    allocations: allocation_pb2_grpc.AllocationServiceStub
    # googleapis-common-protos ships no types for its grpc stubs.
    operations: Any
    metrics: metrics_pb2_grpc.MetricsServiceStub
    billing: billing_pb2_grpc.BillingServiceStub

    @classmethod
    def on_new_channel(cls, address: str, loop: asyncio.AbstractEventLoop, max_receive_bytes: int) -> _Stubs:
        """Open an insecure (plaintext) channel to ``address`` on ``loop`` and make every stub on it."""
        options = (*_CHANNEL_OPTIONS, ("grpc.max_receive_message_length", max_receive_bytes))
        channel = grpc.aio.insecure_channel(address, options=options)
        return cls(
            channel,
            loop,
            tenant_pb2_grpc.TenantServiceStub(channel),
            token_pb2_grpc.TokenServiceStub(channel),
            node_pb2_grpc.NodeServiceStub(channel),
            allocation_pb2_grpc.AllocationServiceStub(channel),
            _operations_stub(channel),
            metrics_pb2_grpc.MetricsServiceStub(channel),
            billing_pb2_grpc.BillingServiceStub(channel),
        )


def _seconds(timeout: object, *, zero_ok: bool, name: str = "timeout") -> float:
    """``timeout`` as seconds if it is a usable deadline (or interval); InvalidValueError naming
    the parameter ``name`` otherwise."""
    # bool is an int to Python, but True is never meant as one second.
    number = timeout if isinstance(timeout, int | float) and not isinstance(timeout, bool) else math.nan
    if math.isfinite(number) and (number > 0 or (zero_ok and number == 0)):
        return float(number)
    least = "0 or more" if zero_ok else "more than 0"
    raise InvalidValueError(name, f"{name} must be a finite number of seconds, {least}, not {timeout!r}")


def _advised_delay(error: grpc.aio.AioRpcError) -> float | None:
    """The seconds a RESOURCE_EXHAUSTED's RetryInfo advises to wait, or None: the server sends one
    only with a call it refused unrun, at a bound on concurrent calls (docs/api.md)."""
    if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            for detail in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.RetryInfo()
                if detail.Unpack(info):
                    return max(0.0, info.retry_delay.ToTimedelta().total_seconds())
    return None


def _error(
    error: grpc.aio.AioRpcError, request: Any, seconds: float, tries: int, request_id: str | None
) -> GpucloudError:
    """The client's exception for a failed call, carrying the ``request_id`` it sent."""
    message = None
    if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        # gRPC says only "Deadline Exceeded"; name the method (from its request message, e.g.
        # GetNodeRequest) and the deadline, which tells a caller whether to raise the timeout.
        rpc = type(request).__name__.removesuffix("Request")
        retried = f" ({tries} tries)" if tries > 1 else ""
        message = f"{rpc}: no answer within {seconds:g} s{retried}"
    return from_rpc_error(error, message=message, request_id=request_id)


class AsyncClient:
    """Talks to one control plane. Use as ``async with AsyncClient(addr, token) as client``.

    Every method takes ``timeout=``: the seconds its call may take, retries included (None: the
    client's ``timeout``); for a listing iterator, each page's call. A client may be used from one
    event loop at a time: used from another (a second ``asyncio.run``), it opens a new channel there.
    """

    def __init__(
        self,
        address: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        max_receive_bytes: int = DEFAULT_MAX_RECEIVE_BYTES,
    ) -> None:
        """``timeout`` is each call's default deadline in seconds (more than 0), retries included; the channel opens
        on first use. ``max_receive_bytes`` is the largest answer taken (a larger one is RESOURCE_EXHAUSTED with no
        reason). InvalidValueError for a timeout that is not a positive, finite number, or a size under 1."""
        self.address = address
        self.timeout = _seconds(timeout, zero_ok=False)
        if isinstance(max_receive_bytes, bool) or not isinstance(max_receive_bytes, int) or max_receive_bytes < 1:
            raise InvalidValueError(
                "max_receive_bytes",
                f"max_receive_bytes must be a whole number of bytes, 1 or more, not {max_receive_bytes!r}",
            )
        self._max_receive_bytes = max_receive_bytes
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._retry = retry or RetryPolicy()
        # Created on first use so it binds to the loop the caller runs in (grpc#32480).
        self._channel_stubs: _Stubs | None = None

    async def __aenter__(self) -> AsyncClient:
        """The client itself; its channel opens on the first call."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the channel."""
        await self.close()

    async def close(self) -> None:
        """Close the channel. Safe to call twice; a later call opens a new channel."""
        stubs, self._channel_stubs = self._channel_stubs, None
        # A channel of another loop cannot be closed from this one (that loop may be closed too):
        # dropping it lets garbage collection release it.
        if stubs is not None and stubs.loop is asyncio.get_running_loop():
            await stubs.channel.close()

    def _stubs(self) -> _Stubs:
        """The stubs on a channel of the running loop, opened on first use."""
        loop = asyncio.get_running_loop()
        stubs = self._channel_stubs
        if stubs is None or stubs.loop is not loop:
            # A grpc.aio channel works only on the loop it was made on (grpc#32480): the channel
            # of an earlier asyncio.run() would raise "Event loop is closed". The old one is
            # dropped rather than closed, for the reason close() gives.
            self._channel_stubs = stubs = _Stubs.on_new_channel(self.address, loop, self._max_receive_bytes)
        return stubs

    async def _call(
        self,
        method: Callable[..., Awaitable[R]],
        request: Any,
        *,
        retry_on: frozenset[grpc.StatusCode] = _SAFE,
        timeout: float | None = None,
        request_id: str | None = None,
        on_trailers: Callable[[grpc.aio.Metadata | None], None] | None = None,
    ) -> R:
        """Make the call, retrying the codes in ``retry_on`` until the deadline; ``request_id`` is the
        idempotency key the request carries, put on the error if it fails. ``on_trailers`` is given
        the trailing metadata of the call that succeeded (only callers that ask pay for reading it)."""
        seconds = self.timeout if timeout is None else _seconds(timeout, zero_ok=True)
        # One deadline for the whole call, retries included; read off time.monotonic (the
        # default loop's clock) rather than loop.time(), which needs the running loop again.
        deadline = time.monotonic() + seconds
        tries = 0
        while True:
            try:
                call = method(request, metadata=self._metadata, timeout=max(0.001, deadline - time.monotonic()))
                response = await call
                if on_trailers is not None:
                    assert isinstance(call, grpc.aio.Call), "only a stub's own call carries trailers"
                    on_trailers(await call.trailing_metadata())
                return response
            except grpc.aio.AioRpcError as error:
                tries += 1
                advised = _advised_delay(error)
                # A call refused at a bound on concurrent calls was not run: any call may be sent
                # again, after the delay the server advised (and a jitter, not to come back in step).
                pause = self._retry.delay(tries) + (advised or 0.0)
                retryable = error.code() in retry_on or advised is not None
                # Give up when the next try could not start before the deadline: the last error
                # (UNAVAILABLE and its reason) says more than a DEADLINE_EXCEEDED would.
                out_of_time = time.monotonic() + pause >= deadline
                if not retryable or self._retry.gives_up_after(tries) or out_of_time:
                    raise _error(error, request, seconds, tries, request_id) from None
                await asyncio.sleep(pause)

    # Tenants --------------------------------------------------------------------------------

    async def create_tenant(
        self, tenant_id: str, display_name: str = "", *, timeout: float | None = None
    ) -> CreatedTenant:
        """Create a tenant and its first API token (operators). Not retried; a taken id is ``AlreadyExistsError``."""
        stub = self._stubs().tenants
        request = tenant_pb2.CreateTenantRequest(tenant_id=tenant_id, display_name=display_name)
        response = await self._call(stub.CreateTenant, request, retry_on=_NEVER, timeout=timeout)
        return CreatedTenant(convert.tenant(response.tenant), response.token, response.token_id)

    async def get_tenant(self, tenant_id: str, *, timeout: float | None = None) -> models.Tenant:
        """The tenant ``tenant_id``. A tenant may read only itself: any other id is ``NotFoundError``."""
        stub = self._stubs().tenants
        request = tenant_pb2.GetTenantRequest(tenant_id=tenant_id)
        return convert.tenant((await self._call(stub.GetTenant, request, timeout=timeout)).tenant)

    async def list_tenants(
        self, *, page_size: int = 0, page_token: str = "", timeout: float | None = None
    ) -> models.Page[models.Tenant]:
        """One page of every tenant, ordered by id (operators)."""
        stub = self._stubs().tenants
        request = tenant_pb2.ListTenantsRequest(page_size=page_size, page_token=page_token)
        response = await self._call(stub.ListTenants, request, timeout=timeout)
        return models.Page([convert.tenant(t) for t in response.tenants], response.next_page_token)

    async def create_tenant_token(self, tenant_id: str, *, timeout: float | None = None) -> models.CreatedToken:
        """Issue another API token for a tenant, for rotation (operators), shown only once; old tokens stay valid
        until revoked (``revoke_token``; ``list_tokens(tenant_id=...)`` shows their ids). Not retried."""
        stub = self._stubs().tenants
        request = tenant_pb2.CreateTenantTokenRequest(tenant_id=tenant_id)
        response = await self._call(stub.CreateTenantToken, request, retry_on=_NEVER, timeout=timeout)
        return models.CreatedToken(response.token, response.token_id)

    # Tokens ---------------------------------------------------------------------------------

    async def create_agent_token(self, node_id: str, *, timeout: float | None = None) -> models.CreatedToken:
        """Mint an agent token bound to ``node_id`` (operators), shown only once; the node need not be registered
        yet. Not retried: a retry after a lost reply would mint a second token."""
        stub = self._stubs().tokens
        request = token_pb2.CreateAgentTokenRequest(node_id=node_id)
        response = await self._call(stub.CreateAgentToken, request, retry_on=_NEVER, timeout=timeout)
        return models.CreatedToken(response.token, response.token_id)

    async def create_operator_token(self, *, timeout: float | None = None) -> models.CreatedToken:
        """Mint another operator token (operators), shown only once: to rotate, switch to it and revoke the old
        one with ``revoke_token``. Not retried: a retry after a lost reply would mint a second token."""
        stub = self._stubs().tokens
        request = token_pb2.CreateOperatorTokenRequest()
        response = await self._call(stub.CreateOperatorToken, request, retry_on=_NEVER, timeout=timeout)
        return models.CreatedToken(response.token, response.token_id)

    async def list_tokens(
        self,
        *,
        tenant_id: str = "",
        node_id: str = "",
        role: str | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> models.Page[models.ApiToken]:
        """One page of API tokens, newest first, never with their secrets (operators). ``tenant_id``, ``node_id``
        and ``role`` (``OPERATOR``, ``TENANT``, ``AGENT``) filter it; a tenant that does not exist is
        ``NotFoundError``."""
        stub = self._stubs().tokens
        request = token_pb2.ListTokensRequest(
            tenant_id=tenant_id,
            node_id=node_id,
            role=convert.token_role_value(role) if role else token_pb2.TOKEN_ROLE_UNSPECIFIED,
            page_size=page_size,
            page_token=page_token,
        )
        response = await self._call(stub.ListTokens, request, timeout=timeout)
        return models.Page([convert.api_token(t) for t in response.tokens], response.next_page_token)

    async def iter_tokens(
        self,
        *,
        tenant_id: str = "",
        node_id: str = "",
        role: str | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> AsyncIterator[models.ApiToken]:
        """Every API token the filters keep, newest first, fetching pages as needed; from ``page_token``'s page
        on when one is given. ``timeout`` bounds each page's call."""
        pages = listings.pages(
            lambda token: self.list_tokens(
                tenant_id=tenant_id,
                node_id=node_id,
                role=role,
                page_size=page_size,
                page_token=token,
                timeout=timeout,
            ),
            page_token,
        )
        async for page in pages:
            for item in page:
                yield item

    async def revoke_token(self, token_id: str, *, timeout: float | None = None) -> models.ApiToken:
        """Revoke a token (operators); the server that answers refuses it from the next call, other replicas
        within 5 s. Idempotent, so retried: a revoked token is returned with its first ``revoke_time``. The last
        operator token that is not revoked is ``FailedPreconditionError`` (LAST_OPERATOR_TOKEN)."""
        stub = self._stubs().tokens
        request = token_pb2.RevokeTokenRequest(token_id=token_id)
        return convert.api_token((await self._call(stub.RevokeToken, request, timeout=timeout)).token)

    # Nodes ----------------------------------------------------------------------------------

    async def register_node(
        self,
        node_id: str,
        *,
        gpu_model: str,
        gpu_uuids: Sequence[str],
        zone: str,
        rack: str,
        leaf_switch: str,
        timeout: float | None = None,
    ) -> models.Node:
        """Register a node whose GPUs are ``gpu_uuids`` in index order. Safe to repeat."""
        stub = self._stubs().nodes
        request = node_pb2.RegisterNodeRequest(
            node_id=node_id,
            gpu_model=convert.gpu_model_value(gpu_model),
            gpus=[node_pb2.Gpu(uuid=u, index=i) for i, u in enumerate(gpu_uuids)],
            zone=zone,
            rack=rack,
            leaf_switch=leaf_switch,
        )
        return convert.node((await self._call(stub.RegisterNode, request, timeout=timeout)).node)

    async def get_node(self, node_id: str, *, timeout: float | None = None) -> models.Node:
        """The node ``node_id`` (operators and agents; an agent reading another node is ``PermissionDeniedError``)."""
        stub = self._stubs().nodes
        request = node_pb2.GetNodeRequest(node_id=node_id)
        return convert.node((await self._call(stub.GetNode, request, timeout=timeout)).node)

    async def list_nodes(
        self,
        *,
        state: str | None = None,
        gpu_model: str | None = None,
        zone: str = "",
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> models.Page[models.Node]:
        """One page of the fleet, ordered by node id (operators). ``state``, ``gpu_model`` and ``zone`` filter it."""
        stub = self._stubs().nodes
        request = node_pb2.ListNodesRequest(
            state=convert.node_state_value(state) if state else node_pb2.NODE_STATE_UNSPECIFIED,
            gpu_model=convert.gpu_model_value(gpu_model) if gpu_model else node_pb2.GPU_MODEL_UNSPECIFIED,
            zone=zone,
            page_size=page_size,
            page_token=page_token,
        )
        response = await self._call(stub.ListNodes, request, timeout=timeout)
        return models.Page([convert.node(n) for n in response.nodes], response.next_page_token)

    async def complete_burn_in(
        self, node_id: str, *, passed: bool = True, detail: str = "", timeout: float | None = None
    ) -> models.Node:
        """Record a burn-in result: passed moves the node to READY, failed to QUARANTINED.

        Not retried; a node not in BURN_IN is ``FailedPreconditionError``.
        """
        stub = self._stubs().nodes
        request = node_pb2.CompleteBurnInRequest(node_id=node_id, passed=passed, detail=detail)
        return convert.node((await self._call(stub.CompleteBurnIn, request, retry_on=_NEVER, timeout=timeout)).node)

    async def cordon_node(self, node_id: str, reason: str = "", *, timeout: float | None = None) -> models.Node:
        """Stop new placements on the node without changing its state (operators). Idempotent, so retried."""
        stub = self._stubs().nodes
        request = node_pb2.CordonNodeRequest(node_id=node_id, reason=reason)
        return convert.node((await self._call(stub.CordonNode, request, timeout=timeout)).node)

    async def uncordon_node(self, node_id: str, *, timeout: float | None = None) -> models.Node:
        """Let placement pick the node again and clear its status reason (operators). Idempotent, so retried."""
        stub = self._stubs().nodes
        request = node_pb2.UncordonNodeRequest(node_id=node_id)
        return convert.node((await self._call(stub.UncordonNode, request, timeout=timeout)).node)

    async def drain_node(self, node_id: str, reason: str = "", *, timeout: float | None = None) -> models.Node:
        """Take the node out of service and cordon it (operators).

        A free node is QUARANTINED at once; a held one drains: its tenant keeps it until release, and it
        is quarantined after its scrub. Not retried: after a lost reply, read the node again.
        """
        request = node_pb2.DrainNodeRequest(node_id=node_id, reason=reason)
        return await self._lifecycle("DrainNode", request, timeout)

    async def start_repair(self, node_id: str, reason: str = "", *, timeout: float | None = None) -> models.Node:
        """Move a QUARANTINED node to REPAIR (operators). Not retried; other states are ``FailedPreconditionError``."""
        request = node_pb2.StartRepairRequest(node_id=node_id, reason=reason)
        return await self._lifecycle("StartRepair", request, timeout)

    async def return_to_service(self, node_id: str, reason: str = "", *, timeout: float | None = None) -> models.Node:
        """Send a QUARANTINED or REPAIR node back to BURN_IN, uncordoned (operators). Not retried."""
        request = node_pb2.ReturnToServiceRequest(node_id=node_id, reason=reason)
        return await self._lifecycle("ReturnToService", request, timeout)

    async def retire_node(self, node_id: str, reason: str = "", *, timeout: float | None = None) -> models.Node:
        """Retire a REGISTERED, QUARANTINED or REPAIR node for good (operators). Not retried."""
        request = node_pb2.RetireNodeRequest(node_id=node_id, reason=reason)
        return await self._lifecycle("RetireNode", request, timeout)

    async def _lifecycle(self, rpc: str, request: Any, timeout: float | None) -> models.Node:
        """Call the node state transition ``rpc``, never retried."""
        # A lost reply followed by a retry would be refused as an illegal transition, which is
        # confusing; the caller re-reads instead.
        method = getattr(self._stubs().nodes, rpc)
        return convert.node((await self._call(method, request, retry_on=_NEVER, timeout=timeout)).node)

    async def list_node_events(
        self, node_id: str, *, page_size: int = 0, page_token: str = "", timeout: float | None = None
    ) -> models.Page[models.NodeEvent]:
        """One page of a node's recorded state changes, oldest first."""
        stub = self._stubs().nodes
        request = node_pb2.ListNodeEventsRequest(node_id=node_id, page_size=page_size, page_token=page_token)
        response = await self._call(stub.ListNodeEvents, request, timeout=timeout)
        return models.Page([convert.node_event(e) for e in response.events], response.next_page_token)

    async def set_health_automation(
        self, gpu_model: str, *, paused: bool, reason: str = "", timeout: float | None = None
    ) -> models.HealthAutomation:
        """Pause (``paused=True``) or resume the health controller's removals in the pool of
        ``gpu_model`` (operators). While paused, its decisions are recorded and nothing is
        drained. Idempotent, so retried."""
        stub = self._stubs().nodes
        request = node_pb2.SetHealthAutomationRequest(
            gpu_model=convert.gpu_model_value(gpu_model), paused=paused, reason=reason
        )
        response = await self._call(stub.SetHealthAutomation, request, timeout=timeout)
        return convert.health_automation(response.automation)

    async def list_health_events(
        self,
        *,
        since: instants.Instant | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> models.Page[models.NodeEvent]:
        """One page of the health controller's decisions across the fleet, oldest first: its
        drains, notices (``HEALTH``) and held removals (``HEALTH_HELD``), at or after ``since``
        (operators)."""
        stub = self._stubs().nodes
        request = node_pb2.ListHealthEventsRequest(
            since=instants.to_timestamp(since, "since"), page_size=page_size, page_token=page_token
        )
        response = await self._call(stub.ListHealthEvents, request, timeout=timeout)
        return models.Page([convert.node_event(e) for e in response.events], response.next_page_token)

    async def get_health_automation(self, *, timeout: float | None = None) -> list[models.HealthAutomation]:
        """Every pool's health automation setting, by GPU model (operators)."""
        stub = self._stubs().nodes
        response = await self._call(stub.GetHealthAutomation, node_pb2.GetHealthAutomationRequest(), timeout=timeout)
        return [convert.health_automation(pool) for pool in response.pools]

    async def set_spare_pool(self, gpu_model: str, spares: int, *, timeout: float | None = None) -> models.SparePool:
        """Keep ``spares`` free nodes of ``gpu_model`` from creates, for the health controller's
        replacements (operators). Idempotent, so retried."""
        stub = self._stubs().nodes
        request = node_pb2.SetSparePoolRequest(gpu_model=convert.gpu_model_value(gpu_model), spares=spares)
        response = await self._call(stub.SetSparePool, request, timeout=timeout)
        return convert.spare_pool(response.pool)

    async def list_spare_pools(self, *, timeout: float | None = None) -> list[models.SparePool]:
        """Every pool's spares and free nodes, by GPU model (operators)."""
        stub = self._stubs().nodes
        response = await self._call(stub.ListSparePools, node_pb2.ListSparePoolsRequest(), timeout=timeout)
        return [convert.spare_pool(pool) for pool in response.pools]

    async def get_fragmentation(self, *, timeout: float | None = None) -> list[models.PoolFragmentation]:
        """Each pool's free capacity and how it lies across leaf switches, by GPU model; every
        node in service in fabric order (operators). A read, so retried."""
        stub = self._stubs().nodes
        response = await self._call(stub.GetFragmentation, node_pb2.GetFragmentationRequest(), timeout=timeout)
        return [convert.pool_fragmentation(pool) for pool in response.pools]

    async def plan_defragmentation(
        self, gpu_model: str, *, blocks: int = 1, max_allocation_nodes: int = 4, timeout: float | None = None
    ) -> models.DefragmentationPlan:
        """The fewest moves of small allocations (of at most ``max_allocation_nodes`` nodes) to free
        nodes elsewhere that would free ``blocks`` leaf switches of ``gpu_model`` whole, and what
        they cost each allocation (operators). A plan only: nothing moves, so it is retried as a
        read. Fewer switches than asked, or none, when no more can be freed: ``summary`` says so."""
        stub = self._stubs().nodes
        request = node_pb2.PlanDefragmentationRequest(
            gpu_model=convert.gpu_model_value(gpu_model), blocks=blocks, max_allocation_nodes=max_allocation_nodes
        )
        response = await self._call(stub.PlanDefragmentation, request, timeout=timeout)
        return convert.defragmentation_plan(response)

    async def apply_defragmentation(
        self, moves: Sequence[models.DefragmentationMove], *, timeout: float | None = None
    ) -> models.DefragmentationApplied:
        """Make the moves of a plan (``plan_defragmentation(...).moves``) on an operator's go: all
        of them in one transaction, or none (operators). Each allocation then runs on its move's
        ``to_node_id``, billed from the move, and each ``from_node_id`` goes to its scrub. Raises
        ``FailedPreconditionError`` (reason MOVE_NO_LONGER_POSSIBLE or SAME_BLOCK_SPLIT,
        ``metadata["field"]`` naming the move) when the fleet changed since the plan: plan again. A move
        already made is answered as made, so a lost reply is safely retried."""
        stub = self._stubs().nodes
        request = node_pb2.ApplyDefragmentationRequest(
            moves=[
                node_pb2.DefragmentationMove(
                    allocation_id=m.allocation_id, from_node_id=m.from_node_id, to_node_id=m.to_node_id
                )
                for m in moves
            ]
        )
        response = await self._call(stub.ApplyDefragmentation, request, retry_on=_SAFE_WITH_KEY, timeout=timeout)
        return convert.defragmentation_applied(response)

    async def audit_isolation(self, *, timeout: float | None = None) -> models.IsolationAudit:
        """Every node's fabric partitions, as its agent reported them, checked against whom the
        node belongs to: the nodes checked and every violation (operators)."""
        stub = self._stubs().nodes
        response = await self._call(stub.AuditIsolation, node_pb2.AuditIsolationRequest(), timeout=timeout)
        return convert.isolation_audit(response)

    # Allocations ----------------------------------------------------------------------------

    async def create_allocation(
        self,
        *,
        gpu_model: str,
        node_count: int = 0,
        tenant_id: str = "",
        request_id: str | None = None,
        priority: int = 0,
        fail_if_unavailable: bool = False,
        same_block: bool = False,
        gpus: int = 0,
        mig_profile: str = "",
        share_milli: int = 0,
        cpu_milli: int = 0,
        memory_mib: int = 0,
        other_models: Sequence[str] = (),
        timeout: float | None = None,
    ) -> models.CreatedAllocation:
        """Allocate ``node_count`` whole nodes, all or nothing; or part of one node.

        Placed at once when the nodes are free and no allocation of the model at least as high in
        ``priority`` (0-1000, higher first) waits; otherwise the answer is ``PENDING``, holding
        nothing, at its ``queue_position``, until the scheduler admits it whole (``wait_admitted``
        waits for that, ``explain_allocation`` says why it waits). With ``fail_if_unavailable``
        the create is refused instead (``ResourceExhaustedError``, reason INSUFFICIENT_CAPACITY,
        or QUOTA_EXCEEDED when it would take its tenant over its quota of the model: ``set_quota``)
        and nothing is recorded. ``same_block``: every node under one leaf switch (one fabric
        block), so that the gang's traffic never crosses a block's uplinks; it waits for a block
        to have them all free, whatever the free count elsewhere.
        Part of one node instead (``node_count`` left 0): at most one of ``gpus`` (1, 2, 4 or 8
        whole GPUs), ``mig_profile`` (one MIG slice: ``"1g.10gb"``, ``"1g.20gb"``, ``"2g.20gb"``,
        ``"3g.40gb"``, ``"4g.40gb"``, ``"7g.80gb"``) or ``share_milli`` (a soft share of one GPU,
        1-999 thousandths), with ``cpu_milli`` (thousandths of a core) and ``memory_mib`` beside on
        the same node; none of the three with either of these last two is CPU and memory alone.
        Such a create is answered ``PENDING`` and the scheduler admits it within a moment
        (``wait_admitted`` waits for that; once ACTIVE, ``node_ids`` is its node and ``gpu_holds``
        what it holds there); with ``fail_if_unavailable`` it is refused unless there is room now.
        A bad combination is ``InvalidArgumentError`` naming the field.
        ``other_models``: further GPU models it accepts after ``gpu_model``, in order of
        preference (at most 4); the scheduler then places it, answered ``PENDING`` as above, on
        the first model with room, and the allocation's ``gpu_model`` says which it got.
        ``request_id`` defaults to a fresh UUIDv7 (also when empty), reused across this call's
        retries; pass your own to make a create idempotent across processes or restarts. The
        answer's ``replayed`` is True when the server answered from the record of an earlier call
        with that key (this call allocated nothing new).
        ``timeout`` bounds the whole call, retries included. Every ``GpucloudError`` it raises
        carries the key it sent as ``.request_id``: when the outcome is unknown
        (``DeadlineExceededError``, ``UnavailableError``), call again with
        ``request_id=error.request_id`` to get the allocation the first call may have made
        rather than a second one.
        """
        stub = self._stubs().allocations
        # An empty key would make retries unsafe: treat it like no key and make one.
        key = request_id or new_request_id()
        request = allocation_pb2.CreateAllocationRequest(
            tenant_id=tenant_id,
            gpu_model=convert.gpu_model_value(gpu_model),
            node_count=node_count,
            request_id=key,
            priority=priority,
            fail_if_unavailable=fail_if_unavailable,
            same_block=same_block,
            gpus=gpus,
            mig_profile=mig_profile,
            share_milli=share_milli,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            other_models=[convert.gpu_model_value(m, "other_models") for m in other_models],
        )
        replayed = False

        def read_replay_mark(trailers: grpc.aio.Metadata | None) -> None:
            nonlocal replayed
            replayed = trailers is not None and trailers.get(REPLAYED_KEY) == "true"

        response = await self._call(
            stub.CreateAllocation,
            request,
            retry_on=_SAFE_WITH_KEY,
            timeout=timeout,
            request_id=key,
            on_trailers=read_replay_mark,
        )
        return convert.created_allocation(response.allocation, replayed=replayed)

    async def get_allocation(self, allocation_id: str, *, timeout: float | None = None) -> models.Allocation:
        """The allocation ``allocation_id``; another tenant's is ``NotFoundError``."""
        stub = self._stubs().allocations
        request = allocation_pb2.GetAllocationRequest(allocation_id=allocation_id)
        return convert.allocation((await self._call(stub.GetAllocation, request, timeout=timeout)).allocation)

    async def explain_allocation(
        self, allocation_id: str, *, timeout: float | None = None
    ) -> models.AllocationExplanation:
        """The allocation ``allocation_id`` and, while it is PENDING, why it waits, most binding
        reason first (none in any other state); another tenant's is ``NotFoundError``."""
        stub = self._stubs().allocations
        request = allocation_pb2.ExplainAllocationRequest(allocation_id=allocation_id)
        return convert.allocation_explanation(await self._call(stub.ExplainAllocation, request, timeout=timeout))

    async def wait_admitted(
        self, allocation_id: str, *, timeout: float = 60.0, poll_s: float = 0.5
    ) -> models.Allocation:
        """Read the allocation every ``poll_s`` seconds until it is no longer PENDING or ``timeout``
        seconds (0 or more) pass, and return the last read: check its ``.state`` (ACTIVE once
        admitted; CANCELLED if it was cancelled while it waited). Each read has the client's
        ``timeout`` as its deadline."""
        deadline = time.monotonic() + _seconds(timeout, zero_ok=True)
        # Checked before the first read: a poll of 0 would read in a tight loop until the deadline.
        interval = _seconds(poll_s, zero_ok=False, name="poll_s")
        while True:
            allocation = await self.get_allocation(allocation_id)
            left = deadline - time.monotonic()
            if allocation.state != "PENDING" or left <= 0:
                return allocation
            # The last read falls at the deadline, not a whole poll after it.
            await asyncio.sleep(min(interval, left))

    async def list_allocations(
        self,
        *,
        tenant_id: str = "",
        state: str | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> models.Page[models.Allocation]:
        """One page of allocations, newest first.

        Tenants see only their own (another tenant's ``tenant_id`` gives an empty page); operators see all,
        or one tenant's with ``tenant_id`` (``NotFoundError`` if there is no such tenant).
        """
        stub = self._stubs().allocations
        request = allocation_pb2.ListAllocationsRequest(
            tenant_id=tenant_id,
            state=convert.allocation_state_value(state) if state else allocation_pb2.ALLOCATION_STATE_UNSPECIFIED,
            page_size=page_size,
            page_token=page_token,
        )
        response = await self._call(stub.ListAllocations, request, timeout=timeout)
        return models.Page([convert.allocation(a) for a in response.allocations], response.next_page_token)

    async def iter_allocations(
        self,
        *,
        tenant_id: str = "",
        state: str | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> AsyncIterator[models.Allocation]:
        """Every allocation visible to the caller, newest first, fetching pages as needed; from
        ``page_token``'s page on when one is given. ``timeout`` bounds each page's call."""
        pages = listings.pages(
            lambda token: self.list_allocations(
                tenant_id=tenant_id, state=state, page_size=page_size, page_token=token, timeout=timeout
            ),
            page_token,
        )
        async for page in pages:
            for item in page:
                yield item

    async def cancel_allocation(self, allocation_id: str, *, timeout: float | None = None) -> models.Operation:
        """Accept a cancel; the returned operation finishes when every node is released."""
        stub = self._stubs().allocations
        request = allocation_pb2.CancelAllocationRequest(allocation_id=allocation_id)
        return convert.operation(await self._call(stub.CancelAllocation, request, timeout=timeout))

    # Quotas ---------------------------------------------------------------------------------

    async def set_quota(
        self,
        tenant_id: str,
        gpu_model: str,
        nodes: int,
        *,
        borrow_limit: int = 0,
        cohort: str = "",
        timeout: float | None = None,
    ) -> models.Quota:
        """Let ``tenant_id`` hold ``nodes`` of ``gpu_model`` (0-100,000) and borrow up to
        ``borrow_limit`` more of what the other tenants of ``cohort`` ("" for none) leave unused
        (operators); an unknown tenant is ``NotFoundError``. Creates over it wait PENDING
        (QUOTA_EXCEEDED), holding up no other tenant; a tenant within its own quota reclaims what
        its cohort borrowed, the scheduler preempting the borrowers' allocations (their
        ``preempted_reason`` says so). Allocations held already stay. Idempotent, so retried."""
        stub = self._stubs().allocations
        request = allocation_pb2.SetQuotaRequest(
            tenant_id=tenant_id,
            gpu_model=convert.gpu_model_value(gpu_model),
            nodes=nodes,
            borrow_limit=borrow_limit,
            cohort=cohort,
        )
        return convert.quota((await self._call(stub.SetQuota, request, timeout=timeout)).quota)

    async def list_quotas(self, *, tenant_id: str = "", timeout: float | None = None) -> list[models.Quota]:
        """Every quota, by tenant then GPU model, with the nodes each tenant's ACTIVE allocations
        hold. Tenants see only their own (another tenant's ``tenant_id`` reads empty); operators
        see all, or one tenant's with ``tenant_id``. A tenant without a quota of a model is not
        limited."""
        stub = self._stubs().allocations
        request = allocation_pb2.ListQuotasRequest(tenant_id=tenant_id)
        response = await self._call(stub.ListQuotas, request, timeout=timeout)
        return [convert.quota(q) for q in response.quotas]

    # Operations -----------------------------------------------------------------------------

    async def get_operation(self, name: str, *, timeout: float | None = None) -> models.Operation:
        """The operation ``name`` (``operations/<id>``), done or not; another tenant's is ``NotFoundError``."""
        stub = self._stubs().operations
        request = operations_pb2.GetOperationRequest(name=name)
        return convert.operation(await self._call(stub.GetOperation, request, timeout=timeout))

    async def wait_operation(self, name: str, *, timeout: float = 60.0) -> models.Operation:
        """Wait until the operation is done or ``timeout`` seconds pass (0 or more); check ``.done``."""
        stub = self._stubs().operations
        deadline = time.monotonic() + _seconds(timeout, zero_ok=True)
        while True:
            left = max(0.0, deadline - time.monotonic())
            wait = Duration()
            wait.FromNanoseconds(int(min(left, 30.0) * 1e9))
            request = operations_pb2.WaitOperationRequest(name=name, timeout=wait)
            # The server answers by ``wait``; the call's deadline leaves it 5 s more to do so.
            operation = convert.operation(await self._call(stub.WaitOperation, request, timeout=min(left, 30.0) + 5))
            if operation.done or time.monotonic() >= deadline:
                return operation

    async def list_operations(
        self, *, page_size: int = 0, page_token: str = "", timeout: float | None = None
    ) -> models.Page[models.Operation]:
        """One page of the operations the caller may see, newest first."""
        stub = self._stubs().operations
        request = operations_pb2.ListOperationsRequest(page_size=page_size, page_token=page_token)
        response = await self._call(stub.ListOperations, request, timeout=timeout)
        return models.Page([convert.operation(o) for o in response.operations], response.next_page_token)

    async def delete_operation(self, name: str, *, timeout: float | None = None) -> None:
        """Forget a finished operation; one still running is ``FailedPreconditionError``.

        Retried like every call safe to repeat. A retry that finds the operation gone counts as deleted: the try
        before it may have deleted it and lost only the reply.
        """
        stub = self._stubs().operations
        tries = 0

        async def delete(request: operations_pb2.DeleteOperationRequest, **call: Any) -> object:
            nonlocal tries
            tries += 1
            try:
                return await stub.DeleteOperation(request, **call)
            except grpc.aio.AioRpcError as error:
                if tries > 1 and error.code() == grpc.StatusCode.NOT_FOUND:
                    return None
                raise

        await self._call(delete, operations_pb2.DeleteOperationRequest(name=name), timeout=timeout)

    # Metrics --------------------------------------------------------------------------------

    async def write_samples(
        self,
        nodes: Sequence[metrics.NodeSamples] = (),
        series: Sequence[metrics.SeriesSamples] = (),
        *,
        timeout: float | None = None,
    ) -> metrics.WriteResult:
        """Write node pushes and columnar series in one all-or-nothing batch.

        Retried like every call safe to repeat: the store takes a sample repeating a stored time with the same
        value as a retry and does not add it twice.
        """
        stub = self._stubs().metrics
        request = metrics.write_request(nodes, series)
        response = await self._call(stub.WriteSamples, request, timeout=timeout)
        return metrics.WriteResult(response.samples_written, response.series_written)

    async def query_metrics(
        self,
        *,
        start: instants.Instant,
        end: instants.Instant,
        node_ids: Sequence[str] = (),
        gpu_indexes: Sequence[int] = (),
        fields: Sequence[str] = (),
        timeout: float | None = None,
    ) -> metrics.MetricsResult:
        """Raw samples in [start, end): datetimes (naive ones are UTC) or int ms since the epoch; empty lists match
        all."""
        stub = self._stubs().metrics
        request = metrics_pb2.QueryRequest(
            selector=metrics.selector(node_ids, gpu_indexes, fields),
            start_ms=instants.to_ms(start, "start"),
            end_ms=instants.to_ms(end, "end"),
        )
        response = await self._call(stub.Query, request, timeout=timeout)
        return metrics.result(response.series, response.stats)

    async def query_metrics_range(
        self,
        *,
        start: instants.Instant,
        end: instants.Instant,
        step: timedelta | int,
        aggregation: str = "avg",
        node_ids: Sequence[str] = (),
        gpu_indexes: Sequence[int] = (),
        fields: Sequence[str] = (),
        timeout: float | None = None,
    ) -> metrics.MetricsResult:
        """One ``aggregation`` (avg, min, max, sum, count, last, rate) per ``step`` (ms if an int) in [start, end),
        whose times are as for ``query_metrics``."""
        stub = self._stubs().metrics
        request = metrics_pb2.QueryRangeRequest(
            selector=metrics.selector(node_ids, gpu_indexes, fields),
            start_ms=instants.to_ms(start, "start"),
            end_ms=instants.to_ms(end, "end"),
            step_ms=instants.duration_ms(step, "step"),
            aggregation=metrics.aggregation_value(aggregation),
        )
        response = await self._call(stub.QueryRange, request, timeout=timeout)
        return metrics.result(response.series, response.stats)

    async def list_metric_outliers(
        self,
        *,
        field: str,
        start: instants.Instant,
        end: instants.Instant,
        k: float = 0.0,
        timeout: float | None = None,
    ) -> metrics.Outliers:
        """GPUs whose average ``field`` in [start, end) sat more than ``k`` spreads (0: the
        server's default, 3) below the median of their peers: the same model under comparable
        load (operators)."""
        stub = self._stubs().metrics
        request = metrics_pb2.ListOutliersRequest(
            field=field, start_ms=instants.to_ms(start, "start"), end_ms=instants.to_ms(end, "end"), k=k
        )
        return metrics.outliers(await self._call(stub.ListOutliers, request, timeout=timeout))

    # Billing --------------------------------------------------------------------------------

    async def get_invoice(self, period: str, *, tenant_id: str = "", timeout: float | None = None) -> billing.Invoice:
        """The invoice for ``period`` (``YYYY-MM``, UTC): frozen if finalized, else computed now.

        ``tenant_id`` defaults to the caller's own tenant; operators must name one.
        """
        stub = self._stubs().billing
        request = billing_pb2.GetInvoiceRequest(tenant_id=tenant_id, period=period)
        return billing.invoice((await self._call(stub.GetInvoice, request, timeout=timeout)).invoice)

    async def finalize_invoice(
        self, period: str, *, tenant_id: str, timeout: float | None = None
    ) -> billing.FinalizedInvoice:
        """Freeze a tenant's invoice for an ended period (operators). Idempotent, so retried."""
        stub = self._stubs().billing
        request = billing_pb2.FinalizeInvoiceRequest(tenant_id=tenant_id, period=period)
        response = await self._call(stub.FinalizeInvoice, request, timeout=timeout)
        return billing.FinalizedInvoice(billing.invoice(response.invoice), response.newly_finalized)

    async def list_usage_events(
        self,
        *,
        tenant_id: str = "",
        start_time: instants.Instant | None = None,
        end_time: instants.Instant | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> models.Page[billing.UsageEvent]:
        """One page of the usage-event log, oldest first; ``[start_time, end_time)`` if given, as datetimes (naive
        ones are UTC) or int ms since the epoch."""
        stub = self._stubs().billing
        request = billing_pb2.ListUsageEventsRequest(
            tenant_id=tenant_id,
            start_time=instants.to_timestamp(start_time, "start_time"),
            end_time=instants.to_timestamp(end_time, "end_time"),
            page_size=page_size,
            page_token=page_token,
        )
        response = await self._call(stub.ListUsageEvents, request, timeout=timeout)
        return models.Page([billing.usage_event(e) for e in response.usage_events], response.next_page_token)

    async def iter_usage_event_pages(
        self,
        *,
        tenant_id: str = "",
        start_time: instants.Instant | None = None,
        end_time: instants.Instant | None = None,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> AsyncIterator[models.Page[billing.UsageEvent]]:
        """Every page of the usage-event log the caller sees, oldest first; ``timeout`` bounds each page's call."""
        pages = listings.pages(
            lambda token: self.list_usage_events(
                tenant_id=tenant_id,
                start_time=start_time,
                end_time=end_time,
                page_size=page_size,
                page_token=token,
                timeout=timeout,
            ),
            "",
        )
        async for page in pages:
            yield page

    async def iter_usage_events(
        self,
        *,
        tenant_id: str = "",
        start_time: instants.Instant | None = None,
        end_time: instants.Instant | None = None,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> AsyncIterator[billing.UsageEvent]:
        """Every usage event the caller sees in the window, oldest first, fetching pages as needed."""
        pages = self.iter_usage_event_pages(
            tenant_id=tenant_id, start_time=start_time, end_time=end_time, page_size=page_size, timeout=timeout
        )
        async for page in pages:
            for event in page:
                yield event

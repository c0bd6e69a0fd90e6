"""The one server interceptor: authenticate, authorize, log, and map domain errors.

For every RPC (and every stream of ``limits.STREAMS``, whose messages are checked one by one
as they arrive) it counts the call against the server's bound on calls in flight, before
anything else (services/limits.py: RESOURCE_EXHAUSTED with a RetryInfo beyond it), resolves
the bearer token to a Principal (UNAUTHENTICATED when it cannot), checks the method's roles in
services/auth/policy.py (PERMISSION_DENIED), admits the call within its caller's own bounds
(RESOURCE_EXHAUSTED again), runs the handler with the principal and log context bound, turns an
ApiError into a rich ``google.rpc.Status`` and writes one log line: method, code, duration,
request id, tenant.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import grpc
import structlog
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from services.auth import policy
from services.auth.authenticator import Authenticator
from services.auth.principal import Principal, set_current_principal
from services.errors import ApiError, Internal, InvalidArgument, PermissionDenied
from services.limits import NO_KEYS, STREAMS, CallLimiter, CallLimits
from services.store import failures
from services.validation import loggable_request_id

log = structlog.get_logger("gpucloud.rpc")

ERROR_DOMAIN = "gpucloud.dev"
_INTERNAL = Internal(reason="INTERNAL_ERROR", message="internal error; see the server log")

Handler = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]
StreamHandler = Callable[[AsyncIterator[Any], grpc.aio.ServicerContext[Any, Any]], AsyncGenerator[Any, None]]
StreamBehaviour = Callable[[AsyncIterator[Any], grpc.aio.ServicerContext[Any, Any]], Awaitable[None]]


def to_status(error: ApiError) -> grpc.Status:
    """A gRPC status with one ErrorInfo, for bad input a BadRequest of every field, and a RetryInfo
    when the error says when to try again."""
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=dict(error.metadata))
    details = [_pack(info)]
    if isinstance(error, InvalidArgument) and error.violations:
        bad_request = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                for v in error.violations
            ]
        )
        details.append(_pack(bad_request))
    if error.retry_delay is not None:
        delay = Duration()
        delay.FromNanoseconds(round(error.retry_delay * 1e9))
        details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    status = status_pb2.Status(code=code_pb2.Code.Value(error.code), message=error.message, details=details)
    converted: grpc.Status = rpc_status.to_status(status)
    return converted


def _pack(message: Any) -> AnyProto:
    packed = AnyProto()
    packed.Pack(message)
    return packed


class ControlPlaneInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates, authorizes, logs and maps the errors of every unary RPC and of the
    streams in ``limits.STREAMS`` (see the module docstring)."""

    def __init__(self, authenticator: Authenticator, limiter: CallLimiter | None = None) -> None:
        self._authenticator = authenticator
        # Bounds each caller's calls in flight (services/limits.py); the defaults when not given.
        self._limiter = limiter or CallLimiter(CallLimits())
        # The wrapped handler of each method, built once: the servicer's handler for a method
        # is the same object on every call, and building a handler per call showed in profiles.
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler[Any, Any], grpc.RpcMethodHandler[Any, Any]]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """The method's handler, wrapped once per method; unknown and public methods pass through unwrapped, and
        streaming ones other than ``limits.STREAMS`` are refused with UNIMPLEMENTED."""
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or policy.is_public(method):
            # Unknown methods stay UNIMPLEMENTED; health and reflection need no token.
            return handler
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        if handler.unary_unary is not None:
            # Every servicer here is async, so the unary behaviour is a coroutine function.
            wrapped = grpc.unary_unary_rpc_method_handler(
                self._wrap(method, cast(Handler, handler.unary_unary)),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        elif handler.stream_stream is not None and method in STREAMS:
            wrapped = grpc.stream_stream_rpc_method_handler(
                self._wrap_stream(method, cast(StreamHandler, handler.stream_stream)),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        else:
            # Only the calls above are authenticated here: another streaming method must not slip past.
            wrapped = _refuse_streaming(handler, method)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, method: str, inner: Handler) -> Handler:
        async def behaviour(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            async with _answered(method, context) as call:
                # Counted before the token is looked up: an unknown token's call costs a lookup,
                # so it is bounded like any other (services/limits.py has the rule).
                self._limiter.arrive()
                counted = NO_KEYS
                try:
                    call.principal = await self._caller(method, context)
                    if type(request) is Undecodable:
                        raise request.as_error(method)
                    # Nothing of the body is read before the caller is known, and only a
                    # well-formed key is logged: a stranger's 4 MB request_id, or a token pasted
                    # into it, is not.
                    call.request_id = loggable_request_id(getattr(request, "request_id", ""))
                    structlog.contextvars.bind_contextvars(request_id=call.request_id)
                    counted = self._limiter.admit(method, call.principal)
                    return await inner(request, context)
                finally:
                    self._limiter.leave(counted)

        return behaviour

    def _wrap_stream(self, method: str, inner: StreamHandler) -> StreamBehaviour:
        """A stream is admitted as a call is, then counted against its caller's stream bound
        only; each message is checked to be well formed and its token still valid."""

        async def behaviour(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]) -> None:
            async with _answered(method, context) as call:
                self._limiter.arrive()
                counted = NO_KEYS
                try:
                    call.principal = await self._caller(method, context)
                    counted = self._limiter.admit(method, call.principal)
                finally:
                    self._limiter.leave(NO_KEYS)
                try:
                    async with contextlib.aclosing(inner(self._checked(method, requests, context), context)) as answers:
                        async for answer in answers:
                            await context.write(answer)
                finally:
                    self._limiter.release(counted)

        return behaviour

    async def _caller(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> Principal:
        """The call's principal, authorized for ``method`` and bound for the handler and the log."""
        principal = await self._authenticator.authenticate(context.invocation_metadata())
        _authorize(method, principal)
        set_current_principal(principal)
        structlog.contextvars.bind_contextvars(tenant=principal.tenant_id, node=principal.node_id)
        return principal

    async def _checked(
        self, method: str, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        """The stream's messages; INVALID_ARGUMENT for one that does not decode, UNAUTHENTICATED
        once the token is revoked (the revocation watcher keeps this a lookup in memory)."""
        async for request in requests:
            if type(request) is Undecodable:
                raise request.as_error(method)
            await self._authenticator.authenticate(context.invocation_metadata())
            yield request


@dataclass
class _Call:
    """What the log line of one call says besides its method."""

    started: float
    code: str = "OK"
    request_id: str | None = None
    principal: Principal | None = None


@contextlib.asynccontextmanager
async def _answered(method: str, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[_Call]:
    """Run a call's body: end the call for what it raises (``_outcome``), log it however it ends.

    No clear_contextvars() first: grpc.aio runs every call in a task of its own, whose context is
    a copy of the server's, so nothing bound by another call is in it (clearing would walk every
    context variable on every call)."""
    call = _Call(time.perf_counter())
    try:
        yield call
    except BaseException as error:
        call.code, status = _outcome(method, error, context)
        if status is None:
            raise
        await context.abort_with_status(status)
    finally:
        log.info(
            "rpc",
            method=method,
            code=call.code,
            duration_ms=round((time.perf_counter() - call.started) * 1000, 2),
            request_id=call.request_id,
            tenant=call.principal.tenant_id if call.principal else None,
            role=call.principal.role.value if call.principal else None,
            # Public (never the secret): which credential acted, for an audit or a revoke.
            token_id=call.principal.token_id if call.principal else None,
        )


def _outcome(
    method: str, error: BaseException, context: grpc.aio.ServicerContext[Any, Any]
) -> tuple[str, grpc.Status | None]:
    """The code to log for a call that raised ``error``, and the status to end it with (None:
    re-raise, for what gRPC itself must see: an abort already sent, a cancellation)."""
    if isinstance(error, ApiError):
        return error.code, to_status(error)
    if isinstance(error, grpc.aio.AbortError):
        return (context.code().name if context.code() is not None else "ABORTED_BY_HANDLER"), None
    if isinstance(error, asyncio.CancelledError):
        # The client went away or its deadline passed; nothing is sent back.
        return "CANCELLED", None
    if not isinstance(error, Exception):
        return "CANCELLED", None
    retryable = failures.translate(error)
    if retryable is None:
        log.exception("rpc_failed", method=method)
        return "INTERNAL", to_status(_INTERNAL)
    log.warning("rpc_database_failure", method=method, error=repr(error))
    return retryable.code, to_status(retryable)


class Undecodable:
    """A request body that does not parse as the method's message (corrupt wire format, a
    string field that is not UTF-8). Handed to the handler in place of the request, so that
    the caller is authenticated first and then told INVALID_ARGUMENT: gRPC would answer the
    deserializer's exception with UNKNOWN, before any credential is checked."""

    __slots__ = ("error",)

    def __init__(self, error: DecodeError | UnicodeDecodeError) -> None:
        self.error = error

    def as_error(self, method: str) -> InvalidArgument:
        """INVALID_ARGUMENT (MALFORMED_REQUEST) naming ``method`` and what failed to decode."""
        return InvalidArgument(
            reason="MALFORMED_REQUEST",
            message=f"the request body is not a valid message for {method}: {self.error}",
            metadata={"method": method},
        )


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserializer``, returning an ``Undecodable`` instead of raising on a bad body."""
    if deserializer is None:
        return None
    parse = deserializer

    def tolerant(data: bytes) -> Any:
        try:
            return parse(data)
        except (DecodeError, UnicodeDecodeError) as error:
            # upb raises DecodeError for every malformed body; protobuf's pure-Python
            # implementation raises UnicodeDecodeError for a string that is not UTF-8.
            return Undecodable(error)

    return tolerant


def _authorize(method: str, principal: Principal) -> None:
    roles = policy.METHOD_ROLES.get(method)
    if roles is None or principal.role not in roles:
        raise PermissionDenied(
            reason="ROLE_NOT_ALLOWED",
            message=f"role {principal.role} may not call {method}",
            metadata={"method": method, "role": principal.role},
        )


def _refuse_streaming(handler: grpc.RpcMethodHandler[Any, Any], method: str) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler of the same kind that refuses the call, for streaming methods, which this
    interceptor does not authenticate yet."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method}: streaming calls are not served yet")

    options = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(refuse, **options)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(refuse, **options)
    return grpc.stream_stream_rpc_method_handler(refuse, **options)

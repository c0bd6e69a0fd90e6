"""Exceptions raised by the gpucloud client, one per gRPC status code.

GpucloudError                 carries code, reason, message, field violations, metadata
├── InvalidArgumentError      fix the request (see .field_violations)
├── NotFoundError
├── AlreadyExistsError
├── FailedPreconditionError   the object's state forbids it now
├── AbortedError              lost a race; create_allocation retries it automatically
├── ResourceExhaustedError    not enough capacity, or a query or message too large
├── UnauthenticatedError
├── PermissionDeniedError
├── UnavailableError          server or its storage unavailable; safe calls are retried
├── DeadlineExceededError
└── InternalError

Every GpucloudError of a call that sent a ``request_id`` (``create_allocation``) carries it in
``.request_id``: when the outcome is unknown (DeadlineExceededError, UnavailableError), call
again with ``request_id=error.request_id`` to get the first call's result instead of a second
allocation.

InvalidValueError (a ValueError) is raised before any call, for an argument the client cannot
put into a request (an unknown GPU model name, a float for a time, a timeout that is not a
positive number); ``.field`` names the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
from google.rpc import error_details_pb2, status_pb2

_STATUS_DETAILS_KEY = "grpc-status-details-bin"


class InvalidValueError(ValueError):
    """An argument the client refuses before calling: ``field`` is the parameter it was given as
    (``gpu_model``, ``state``, ``aggregation``, ``start``, ``timeout``), the request field's name where
    the parameter has it, so a caller can point at its own input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class GpucloudError(Exception):
    """An RPC failed. ``reason`` is the stable machine-readable cause (ErrorInfo.reason).

    ``request_id`` is the idempotency key the failed call sent (the one given, or the one the client made up),
    None for a call that sends none: pass it back as ``request_id=`` to retry a create whose outcome is unknown.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        field_violations: Mapping[str, str] | None = None,
        metadata: Mapping[str, str] | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.reason = reason
        self.field_violations: dict[str, str] = dict(field_violations or {})
        self.metadata: dict[str, str] = dict(metadata or {})
        self.request_id = request_id

    def __str__(self) -> str:
        reason = f" {self.reason}" if self.reason else ""
        return f"{self.code.name}{reason}: {self.message}"


class InvalidArgumentError(GpucloudError):
    """INVALID_ARGUMENT: the request is wrong whatever the system's state; sending it again cannot help.

    A bad field (reason INVALID_FIELD; ``field_violations`` names each, at most 10, with the total in
    ``metadata["violations"]`` when there were more), a bad page token (INVALID_PAGE_TOKEN), a ``request_id`` reused
    for a different request (IDEMPOTENCY_KEY_REUSED), a metric sample not newer than what the store holds for its
    series (SAMPLES_OUT_OF_ORDER) or a body that is not a valid message (MALFORMED_REQUEST). Never retried.
    """

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(GpucloudError):
    """NOT_FOUND: no such tenant, node, allocation, operation or invoice, or one the caller may not see.

    Another tenant's object reads exactly like a missing one, so ids cannot be probed; a tenant also sees it for the
    metrics of a node it never held. ``reason`` is ``<KIND>_NOT_FOUND``: ``NODE_NOT_FOUND``, ``INVOICE_NOT_FOUND``...
    """

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(GpucloudError):
    """ALREADY_EXISTS: what the call would create exists already.

    A taken tenant id (TENANT_EXISTS, whatever the display name), a node registered again with a different
    inventory (NODE_INVENTORY_MISMATCH), a GPU UUID that belongs to another node (GPU_ALREADY_REGISTERED), or a
    registration that lost to a concurrent one (NODE_REGISTERED_CONCURRENTLY). Registering a node again with the same
    inventory is not an error: it returns the node.
    """

    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPreconditionError(GpucloudError):
    """FAILED_PRECONDITION: the object's current state forbids the call; read the state again before deciding.

    A node event its state does not allow (ILLEGAL_NODE_TRANSITION, e.g. retiring an allocated node), finalizing a
    period that has not ended (PERIOD_NOT_ENDED), deleting a running operation (OPERATION_NOT_DONE), cancelling
    an operation, which is never allowed (OPERATION_NOT_CANCELLABLE), or a defragmentation move the fleet no longer
    allows (MOVE_NO_LONGER_POSSIBLE or SAME_BLOCK_SPLIT, ``metadata["field"]`` naming the move). Never retried.
    """

    code = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(GpucloudError):
    """ABORTED: the call lost a race to a concurrent one; retrying the whole call may succeed.

    Reasons: PLACEMENT_CONTENDED, IDEMPOTENCY_KEY_IN_USE (a call with the same ``request_id`` is still running),
    NODE_CHANGED_CONCURRENTLY and DATABASE_CONFLICT. ``create_allocation`` retries it itself within its deadline,
    keeping its ``request_id``; every other call raises it at once.
    """

    code = grpc.StatusCode.ABORTED


class ResourceExhaustedError(GpucloudError):
    """RESOURCE_EXHAUSTED: not enough capacity or quota, or too large an answer.

    INSUFFICIENT_CAPACITY: ``create_allocation(fail_if_unavailable=True)`` was not admitted by the scheduling
    pass that took it in; ``metadata["reason"]`` is why (WAITING_FOR_CAPACITY, BEHIND_GANGS, TOPOLOGY, ...,
    as ``explain_allocation`` names it), with its figures (``metadata["free"]``, ``["needed"]``, ...), and,
    all or nothing, it holds none; without the flag it waits PENDING instead.
    QUOTA_EXCEEDED: the same create would take its tenant over its quota of the model, with what its cohort
    may lend (``metadata["used"]``, ``["limit"]``, ``["nominal"]``, ``["needed"]``, ``["gpu_model"]``); it
    records nothing, and without the flag it waits PENDING (QUOTA_EXCEEDED) instead.
    QUERY_TOO_LARGE: a metrics query matched more
    than 200,000 points. With no ``reason``, gRPC itself refused a message or its headers as too large.
    """

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnauthenticatedError(GpucloudError):
    """UNAUTHENTICATED: the call carried no bearer token (MISSING_TOKEN), authorization of another form
    (MALFORMED_AUTHORIZATION) or a token that matches no live credential (INVALID_TOKEN)."""

    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDeniedError(GpucloudError):
    """PERMISSION_DENIED: the token is valid but may not do this: its role may not call the method
    (ROLE_NOT_ALLOWED), a tenant asked for another tenant (OTHER_TENANT), or an agent for another node
    (AGENT_NODE_MISMATCH)."""

    code = grpc.StatusCode.PERMISSION_DENIED


class UnavailableError(GpucloudError):
    """UNAVAILABLE: the call may succeed if made again later.

    With no ``reason`` the transport failed (no server at the address, a dropped connection); with one, the server's
    database or storage failed (DATABASE_UNAVAILABLE, STORAGE_FULL, STORAGE_ERROR) or its metrics store is closing
    (METRICS_UNAVAILABLE). Retried with capped exponential back-off until the call's deadline, except by
    ``create_tenant``, ``create_tenant_token``, ``create_agent_token``, ``complete_burn_in`` and the node
    lifecycle calls (drain, repair, return to service, retire), which raise it at once: the first attempt may
    have taken effect.
    """

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(GpucloudError):
    """DEADLINE_EXCEEDED: no answer within the call's deadline (``timeout``, retries included); the message names
    the method and the deadline. The call may still have taken effect on the server: retry a create with
    ``request_id=error.request_id``."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class InternalError(GpucloudError):
    """INTERNAL: the server failed in a way it did not expect (a bug: the server log has the traceback, the message
    does not). The client raises it too when a listing returns the same page token twice."""

    code = grpc.StatusCode.INTERNAL


_BY_CODE: dict[grpc.StatusCode, type[GpucloudError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        AlreadyExistsError,
        FailedPreconditionError,
        AbortedError,
        ResourceExhaustedError,
        UnauthenticatedError,
        PermissionDeniedError,
        UnavailableError,
        DeadlineExceededError,
        InternalError,
    )
}


def from_rpc_error(
    error: grpc.aio.AioRpcError, *, message: str | None = None, request_id: str | None = None
) -> GpucloudError:
    """Translate a failed call, reading ErrorInfo and BadRequest from the status details. ``message`` replaces
    gRPC's (its "Deadline Exceeded" names neither the method nor the deadline); ``request_id`` is the key sent."""
    code = error.code()
    reason = ""
    violations: dict[str, str] = {}
    metadata: dict[str, str] = {}
    for key, value in error.trailing_metadata() or ():
        if key != _STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            bad = error_details_pb2.BadRequest()
            if detail.Unpack(info):
                reason, metadata = info.reason, dict(info.metadata)
            elif detail.Unpack(bad):
                violations.update({v.field: v.description for v in bad.field_violations})
    cls = _BY_CODE.get(code, GpucloudError)
    return cls(
        message or error.details() or code.name,
        code=code,
        reason=reason,
        field_violations=violations,
        metadata=metadata,
        request_id=request_id,
    )

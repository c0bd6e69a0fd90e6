"""Exceptions raised by the gpucloud client, one per gRPC status code.

GpucloudError                 carries code, reason, message, field violations, metadata
├── InvalidArgumentError      fix the request (see .field_violations)
├── NotFoundError
├── AlreadyExistsError
├── FailedPreconditionError   the object's state forbids it now
├── AbortedError              lost a race; creates are retried automatically
├── ResourceExhaustedError    not enough capacity
├── UnauthenticatedError
├── PermissionDeniedError
├── UnavailableError          server unreachable; safe calls are retried automatically
├── DeadlineExceededError
└── InternalError
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
from google.rpc import error_details_pb2, status_pb2

_STATUS_DETAILS_KEY = "grpc-status-details-bin"


class GpucloudError(Exception):
    """An RPC failed. ``reason`` is the stable machine-readable cause (ErrorInfo.reason)."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        field_violations: Mapping[str, str] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.reason = reason
        self.field_violations: dict[str, str] = dict(field_violations or {})
        self.metadata: dict[str, str] = dict(metadata or {})

    def __str__(self) -> str:
        reason = f" {self.reason}" if self.reason else ""
        return f"{self.code.name}{reason}: {self.message}"


class InvalidArgumentError(GpucloudError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(GpucloudError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(GpucloudError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPreconditionError(GpucloudError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(GpucloudError):
    code = grpc.StatusCode.ABORTED


class ResourceExhaustedError(GpucloudError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnauthenticatedError(GpucloudError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDeniedError(GpucloudError):
    code = grpc.StatusCode.PERMISSION_DENIED


class UnavailableError(GpucloudError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(GpucloudError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class InternalError(GpucloudError):
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


def from_rpc_error(error: grpc.aio.AioRpcError) -> GpucloudError:
    """Translate a failed call, reading ErrorInfo and BadRequest from the status details."""
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
    return cls(error.details() or code.name, code=code, reason=reason, field_violations=violations, metadata=metadata)

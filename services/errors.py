"""Errors of the control plane's domain, independent of gRPC.

Rules and repositories raise these; the server's error interceptor turns them into a
``google.rpc.Status`` with one ``ErrorInfo`` (the stable ``reason``) and, for bad input, a
``BadRequest`` naming every field at fault.

What an error says goes back to a caller, and often into a terminal or a log, so every error
scrubs itself when it is made: the secret of any API token in its message, metadata or field
violations is replaced by ``<redacted>`` (a caller who pasted a token into an id field must
not have it echoed), and each text is cut to a bounded length (a field of megabytes must not
be echoed whole).

    ApiError
    ├── InvalidArgument       bad input, whatever the state of the system
    ├── NotFound              no such object, or not visible to the caller
    ├── AlreadyExists
    ├── FailedPrecondition    not allowed in the object's current state
    ├── Aborted               lost a race; retry the whole call
    ├── ResourceExhausted     not enough capacity
    ├── Unauthenticated
    ├── PermissionDenied
    ├── Unavailable           the database is unreachable or busy; retry the call
    └── Internal              a defect: nothing more is said to the caller
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from services.auth.tokens import redact


class Code(StrEnum):
    """The gRPC status code an error maps to, by its canonical name."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL = "INTERNAL"


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a request: its path (``gpus[3].uuid``) and what is wrong with it."""

    field: str
    description: str


@dataclass(eq=False)
class ApiError(Exception):
    """Base of every error a caller of the API may see."""

    reason: str
    message: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    code: Code = field(init=False, default=Code.FAILED_PRECONDITION)
    # Seconds after which the same call may succeed, sent as a google.rpc.RetryInfo; None: no advice.
    retry_delay: float | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        # The one place every error passes: nothing it says may carry a secret or be unbounded.
        self.message = shown(self.message, MAX_MESSAGE)
        self.metadata = {key: shown(value, MAX_METADATA_VALUE) for key, value in self.metadata.items()}

    def __str__(self) -> str:
        return f"{self.code}: {self.reason}: {self.message}"


# What one error says, at most. Its message, ErrorInfo and BadRequest all travel in response
# headers, which gRPC refuses past 8-16 KB (the client then sees a bare RESOURCE_EXHAUSTED and
# loses every detail), so a request with a thousand bad fields is answered with the first few,
# each cut short, and the count of the rest.
MAX_REPORTED_VIOLATIONS = 10
MAX_VIOLATIONS_IN_MESSAGE = 3
MAX_FIELD_PATH = 80
MAX_DESCRIPTION = 160
MAX_MESSAGE = 1024
MAX_METADATA_VALUE = 1024


def cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit - 3`` characters and "..." when it is longer."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown(text: str, limit: int) -> str:
    """``text`` as an error may show it: any token's secret redacted, then cut to ``limit`` characters."""
    return cut(redact(text), limit)


@dataclass(eq=False)
class InvalidArgument(ApiError):
    """The request is malformed regardless of the system's state; it names each bad field."""

    violations: tuple[FieldViolation, ...] = ()
    code: Code = field(init=False, default=Code.INVALID_ARGUMENT)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.violations = tuple(
            FieldViolation(shown(v.field, MAX_FIELD_PATH), shown(v.description, MAX_DESCRIPTION))
            for v in self.violations[:MAX_REPORTED_VIOLATIONS]
        )

    @classmethod
    def for_fields(
        cls, violations: Sequence[FieldViolation], *, total: int | None = None, reason: str = "INVALID_FIELD"
    ) -> InvalidArgument:
        """Bad input in the fields of ``violations``, of ``total`` violations in all (default:
        as many as given); reports at most ``MAX_REPORTED_VIOLATIONS``, each cut short."""
        error = cls(reason=reason, message="", violations=tuple(violations))
        # The summary is made of the violations as __post_init__ left them (redacted, cut, at
        # most MAX_REPORTED_VIOLATIONS), so it is as scrubbed as they are, and bounded.
        reported = error.violations
        total = len(violations) if total is None else total
        message = "; ".join(f"{v.field}: {v.description}" for v in reported[:MAX_VIOLATIONS_IN_MESSAGE])
        metadata = {"fields": ", ".join(v.field for v in reported)}
        if total > MAX_VIOLATIONS_IN_MESSAGE:
            message += f"; and {total - MAX_VIOLATIONS_IN_MESSAGE} more ({total} in all)"
        if total > len(reported):
            metadata["violations"] = str(total)
        error.message, error.metadata = message, metadata
        return error

    @classmethod
    def for_field(cls, field_path: str, description: str, *, reason: str = "INVALID_FIELD") -> InvalidArgument:
        """Bad input in one field: ``for_fields`` with a single violation."""
        return cls.for_fields([FieldViolation(field_path, description)], reason=reason)


@dataclass(eq=False)
class NotFound(ApiError):
    """The object does not exist, or belongs to another tenant (which must look the same)."""

    code: Code = field(init=False, default=Code.NOT_FOUND)

    @classmethod
    def of(cls, kind: str, object_id: str, *, field_path: str) -> NotFound:
        """NOT_FOUND with reason ``<KIND>_NOT_FOUND``, naming the object's id and the request field that gave it."""
        return cls(
            reason=f"{kind.upper()}_NOT_FOUND",
            message=f"{kind} {object_id!r} not found",
            metadata={kind + "_id": object_id, "field": field_path},
        )


@dataclass(eq=False)
class AlreadyExists(ApiError):
    """An object with this identity already exists: a taken tenant id (even by an identical request), a
    node registered with another inventory, a GPU that belongs to another node."""

    code: Code = field(init=False, default=Code.ALREADY_EXISTS)


@dataclass(eq=False)
class FailedPrecondition(ApiError):
    """The object's current state does not allow the operation (AIP-216)."""

    code: Code = field(init=False, default=Code.FAILED_PRECONDITION)


@dataclass(eq=False)
class Aborted(ApiError):
    """A concurrent call won a race; the caller should retry the whole call."""

    code: Code = field(init=False, default=Code.ABORTED)


@dataclass(eq=False)
class ResourceExhausted(ApiError):
    """Not enough capacity (nothing was held), or a query too large to answer."""

    code: Code = field(init=False, default=Code.RESOURCE_EXHAUSTED)


@dataclass(eq=False)
class Unauthenticated(ApiError):
    """No token, or a token that matches no live credential."""

    code: Code = field(init=False, default=Code.UNAUTHENTICATED)


@dataclass(eq=False)
class PermissionDenied(ApiError):
    """The caller is known but may not do this: its role may not call the method, a tenant named
    another tenant, or an agent spoke for another node."""

    code: Code = field(init=False, default=Code.PERMISSION_DENIED)


@dataclass(eq=False)
class Unavailable(ApiError):
    """A dependency (the database) failed in a way a retry of the same call may fix."""

    code: Code = field(init=False, default=Code.UNAVAILABLE)


@dataclass(eq=False)
class Internal(ApiError):
    """A defect: the server failed in a way it did not foresee. The caller learns nothing more;
    the server logs the traceback (``rpc_failed``)."""

    code: Code = field(init=False, default=Code.INTERNAL)

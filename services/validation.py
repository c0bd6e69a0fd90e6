"""Field checks shared by every resource's request rules.

Each check appends to a list of violations instead of raising, so one error names every bad
field of a request at once. ``Violations.raise_if_any`` turns the list into INVALID_ARGUMENT.

Every string check refuses a value that holds an API token's secret, saying so without
showing it: a credential pasted into the wrong field is neither stored nor echoed back.
"""

from __future__ import annotations

import re

from services.auth.tokens import contains_secret
from services.errors import MAX_REPORTED_VIOLATIONS, FieldViolation, InvalidArgument, cut
from services.paging import Cursor, PageTokens

ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
MAX_TEXT = 256
MAX_REQUEST_ID = 64
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
# google.protobuf.Timestamp's range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
TIMESTAMP_MIN_SECONDS = -62_135_596_800
TIMESTAMP_MAX_SECONDS = 253_402_300_799
# What a field holding a token is told: never the value, which would echo the secret.
A_SECRET = "holds an API token, secret included (not shown); a credential goes only in the authorization metadata"


def request_id_problem(value: str) -> str | None:
    """What is wrong with ``value`` as an idempotency key (optional, at most 64 printable ASCII
    characters, no spaces, no token), or None when nothing is."""
    if contains_secret(value):
        return A_SECRET
    if len(value) > MAX_REQUEST_ID:
        return f"is {len(value)} characters long; the limit is {MAX_REQUEST_ID}"
    if not (value.isascii() and value.isprintable()) or " " in value:
        return "must be printable ASCII without spaces (a UUID is recommended)"
    return None


def loggable_request_id(value: str) -> str | None:
    """``value`` when it is a well-formed idempotency key, else None: all a log may show of it."""
    return value if value and request_id_problem(value) is None else None


def checked_id(field_path: str, value: str) -> str:
    """``value``, a request's one resource id, when well formed; INVALID_ARGUMENT naming
    ``field_path`` otherwise (``Violations.identifier``)."""
    v = Violations()
    v.identifier(field_path, value)
    v.raise_if_any()
    return value


class Violations:
    """Collects the bad fields of one request; ``count`` counts them all."""

    def __init__(self) -> None:
        self.items: list[FieldViolation] = []
        self._count = 0
        self._token_error: InvalidArgument | None = None

    @property
    def count(self) -> int:
        """Violations added so far, kept or only counted."""
        return self._count

    def add(self, field_path: str, description: str) -> None:
        """Record a bad field; past ``MAX_REPORTED_VIOLATIONS`` it is only counted."""
        self._count += 1
        # Past what one error reports, violations are only counted: a batch of a million bad
        # samples must not build a million records to report the first few.
        if len(self.items) < MAX_REPORTED_VIOLATIONS:
            self.items.append(FieldViolation(field_path, description))

    def raise_if_any(self) -> None:
        """Raise INVALID_ARGUMENT naming the bad fields, if any; a bad page token alone keeps its own reason."""
        if self._count == 1 and self._token_error is not None:
            raise self._token_error  # keeps its reason, INVALID_PAGE_TOKEN
        if self._count:
            raise InvalidArgument.for_fields(self.items, total=self._count)

    def page_token(self, tokens: PageTokens, token: str, scope: dict[str, str | int]) -> Cursor | None:
        """The cursor of a page token, or None; a bad token joins the other violations."""
        try:
            return tokens.decode(token, scope)
        except InvalidArgument as error:
            self._token_error = error
            for violation in error.violations:
                self.add(violation.field, violation.description)
            return None

    def _to_check(self, field_path: str, value: str, *, required: bool) -> bool:
        """Whether a string field needs its own checks: not when it is empty (a violation if
        ``required``) nor when it holds a token (a violation that never shows the value)."""
        if not value:
            if required:
                self.add(field_path, "is required")
            return False
        if contains_secret(value):
            self.add(field_path, A_SECRET)
            return False
        return True

    def identifier(self, field_path: str, value: str, *, required: bool = True) -> None:
        """A resource id: 1-63 of lowercase letters, digits and '-', not starting with '-'."""
        if self._to_check(field_path, value, required=required) and not ID_PATTERN.fullmatch(value):
            self.add(
                field_path,
                f"{cut(value, 80)!r} must be 1-63 characters of a-z, 0-9 and '-', starting with a letter or digit",
            )

    def text(self, field_path: str, value: str, *, max_length: int = MAX_TEXT, required: bool = False) -> None:
        """Free text: printable, at most ``max_length`` characters, no token."""
        if not self._to_check(field_path, value, required=required):
            return
        if len(value) > max_length:
            self.add(field_path, f"is {len(value)} characters long; the limit is {max_length}")
        elif not value.isprintable():
            self.add(field_path, "contains control characters")

    def request_id(self, field_path: str, value: str) -> None:
        """An idempotency key: optional, at most 64 printable ASCII characters, no spaces, no token."""
        problem = request_id_problem(value) if value else None
        if problem is not None:
            self.add(field_path, problem)

    def enum(self, field_path: str, value: int, known: frozenset[int], *, required: bool = True) -> None:
        """A proto enum value: known to this server, and not *_UNSPECIFIED when required."""
        if value == 0:
            if required:
                self.add(field_path, "is required")
            return
        if value not in known:
            self.add(field_path, f"unknown value {value}")

    def timestamp_us(self, field_path: str, seconds: int, nanos: int) -> int | None:
        """Microseconds since the epoch of a protobuf Timestamp's ``seconds`` and ``nanos``;
        None when they are outside what a Timestamp may hold (added as a violation)."""
        if not TIMESTAMP_MIN_SECONDS <= seconds <= TIMESTAMP_MAX_SECONDS:
            self.add(field_path, f"seconds must be within years 0001-9999 (got {seconds})")
            return None
        if not 0 <= nanos < 1_000_000_000:
            self.add(field_path, f"nanos must be 0-999999999 (got {nanos})")
            return None
        return seconds * 1_000_000 + nanos // 1000

    def page_size(self, field_path: str, value: int) -> int:
        """The effective page size: 0 means the default, large values are capped."""
        if value < 0:
            self.add(field_path, f"must not be negative (got {value})")
            return DEFAULT_PAGE_SIZE
        if value == 0:
            return DEFAULT_PAGE_SIZE
        return min(value, MAX_PAGE_SIZE)

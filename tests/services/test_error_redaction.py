"""Every error scrubs itself: no token secret, whole or cut short, and nothing unbounded, in
what it says; every string check refuses a value that holds a token, without showing it."""

from __future__ import annotations

import pytest

from services.auth import tokens
from services.errors import MAX_MESSAGE, FailedPrecondition, FieldViolation, InvalidArgument, NotFound
from services.validation import Violations, loggable_request_id

TOKEN = tokens.issue().plaintext
TOKEN_ID, SECRET = tokens.split(TOKEN) or ("", "")


def said(error: InvalidArgument | NotFound | FailedPrecondition) -> str:
    parts = [error.message, *error.metadata.values()]
    if isinstance(error, InvalidArgument):
        parts += [f"{v.field} {v.description}" for v in error.violations]
    return "\n".join(parts)


@pytest.mark.parametrize(
    "text",
    [
        TOKEN,
        f"{TOKEN!r} is not an id",
        f"Bearer {TOKEN}",
        TOKEN[:30] + "...",  # cut short by the code that made the message: 9 characters of secret
        f"{TOKEN} " * 3,
    ],
)
def test_no_error_says_any_part_of_a_secret(text: str) -> None:
    made: list[InvalidArgument | NotFound | FailedPrecondition] = [
        InvalidArgument.for_field(f"labels[{text!r}]", f"{text!r} is not a node id"),
        InvalidArgument(reason="X", message=text, metadata={"value": text}, violations=(FieldViolation(text, text),)),
        NotFound(reason="X_NOT_FOUND", message=f"x {text!r} not found", metadata={"x_id": text}),
        FailedPrecondition(reason="X", message=text),
    ]
    for error in made:
        shown = said(error) + str(error)
        assert SECRET[:6] not in shown, shown
        assert f"gpc_{TOKEN_ID}_<redacted>" in shown  # the public id stays, to say which token it was


def test_no_error_says_an_unbounded_text() -> None:
    huge = "x" * 1_000_000
    error = FailedPrecondition(reason="X", message=huge, metadata={"value": huge})
    assert len(error.message) == MAX_MESSAGE
    assert error.message.endswith("...")
    assert all(len(value) <= MAX_MESSAGE for value in error.metadata.values())
    bad = InvalidArgument(reason="X", message="m", violations=tuple(FieldViolation(huge, huge) for _ in range(1000)))
    assert len(bad.violations) == 10
    assert all(len(v.field) + len(v.description) < 300 for v in bad.violations)


def test_text_without_a_token_is_unchanged() -> None:
    for text in ("gpc_team_alpha", "gpc_0123", "node 'gpc-1' not found", "gpc_0123456789abcdef_"):
        assert tokens.redact(text) == text
        assert not tokens.contains_secret(text)


@pytest.mark.parametrize("check", ["identifier", "text", "request_id"])
def test_every_string_check_refuses_a_token_without_showing_it(check: str) -> None:
    for value in (TOKEN, f"see {TOKEN}"):
        v = Violations()
        getattr(v, check)("field", value)
        with pytest.raises(InvalidArgument) as refused:
            v.raise_if_any()
        (violation,) = refused.value.violations
        assert violation.field == "field"
        assert "holds an API token" in violation.description
        assert TOKEN_ID not in said(refused.value)
        assert SECRET[:6] not in said(refused.value)


def test_only_a_well_formed_request_id_may_be_logged() -> None:
    assert loggable_request_id("0b9e7f0e-1c1f-4c57-9a43-1f0c2c1b8f2e") == "0b9e7f0e-1c1f-4c57-9a43-1f0c2c1b8f2e"
    for bad in ("", "k" * 65, "has space", "tab\t", "ünïcode", TOKEN):
        assert loggable_request_id(bad) is None, bad

"""Shared field checks: each names the bad field, collects every violation, and never raises early."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.errors import Code, FieldViolation, InvalidArgument
from services.validation import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    MAX_REQUEST_ID,
    MAX_TEXT,
    TIMESTAMP_MAX_SECONDS,
    TIMESTAMP_MIN_SECONDS,
    Violations,
)

ID_CHARS = string.ascii_lowercase + string.digits + "-"


def _fields(v: Violations) -> list[str]:
    return [item.field for item in v.items]


@pytest.mark.parametrize("value", ["a", "0", "node-001", "a" * 63, "9-9", "a-", "zone-a"])
def test_identifier_accepts_well_formed_ids(value: str) -> None:
    """1-63 characters of a-z, 0-9 and '-', not starting with '-', are accepted."""
    v = Violations()
    v.identifier("node_id", value)
    assert v.items == []


@pytest.mark.parametrize(
    "value",
    ["-a", "A", "Node", "a" * 64, "a b", "a_b", "a.b", "é", "a\n", "a\x00", " a", "\uff41", "a/b", "\u0131"],
)
def test_identifier_rejects_malformed_ids(value: str) -> None:
    """Upper case, punctuation, non-ASCII, leading '-', and 64+ characters are rejected, naming the field."""
    v = Violations()
    v.identifier("node_id", value)
    assert _fields(v) == ["node_id"]


def test_identifier_required_and_optional() -> None:
    """An empty id is 'is required' when required and accepted when optional."""
    v = Violations()
    v.identifier("tenant_id", "")
    v.identifier("zone", "", required=False)
    assert v.items == [FieldViolation("tenant_id", "is required")]


def test_identifier_description_truncates_huge_values() -> None:
    """A huge bad id is shown truncated in the description, so errors stay small."""
    v = Violations()
    v.identifier("node_id", "X" * 10_000)
    assert len(v.items[0].description) < 300


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_identifier_matches_its_specification(value: str) -> None:
    """Any text is accepted iff it is 1-63 chars of [a-z0-9-] not starting with '-'."""
    v = Violations()
    v.identifier("id", value, required=False)
    valid = value == "" or (len(value) <= 63 and set(value) <= set(ID_CHARS) and not value.startswith("-"))
    assert (v.items == []) == valid


def test_text_limits_length_and_control_characters() -> None:
    """Free text up to MAX_TEXT printable characters passes; longer or with control characters fails."""
    v = Violations()
    v.text("ok", "x" * MAX_TEXT)
    v.text("unicode", "Überhitzung 🔥 GPU 3")
    v.text("empty", "")
    assert v.items == []
    v.text("long", "x" * (MAX_TEXT + 1))
    v.text("ctrl", "line\nbreak")
    v.text("nul", "a\x00b")
    v.text("required", "", required=True)
    v.text("short", "abcdef", max_length=5)
    assert _fields(v) == ["long", "ctrl", "nul", "required", "short"]


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", True),
        ("0b8e3c1e-2f4a-4b43-9c0e-0d7e1c1a2b3c", True),
        ("k" * MAX_REQUEST_ID, True),
        ("k" * (MAX_REQUEST_ID + 1), False),
        ("has space", False),
        ("tab\there", False),
        ("ключ", False),
        ("a\x7f", False),
    ],
)
def test_request_id(value: str, ok: bool) -> None:
    """A request_id is optional, at most 64 printable ASCII characters and has no spaces."""
    v = Violations()
    v.request_id("request_id", value)
    assert (v.items == []) is ok
    if not ok:
        assert _fields(v) == ["request_id"]


def test_enum_checks_known_and_unspecified() -> None:
    """0 is 'is required' only when required; unknown numbers are refused; known ones pass."""
    known = frozenset({1, 2, 3})
    v = Violations()
    v.enum("a", 2, known)
    v.enum("b", 0, known, required=False)
    assert v.items == []
    v.enum("c", 0, known)
    v.enum("d", 4, known)
    v.enum("e", -1, known, required=False)
    assert _fields(v) == ["c", "d", "e"]
    assert v.items[0].description == "is required"


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_page_size_normalises_every_int(value: int) -> None:
    """Negative is a violation (and the default); 0 is the default; others are capped at MAX_PAGE_SIZE."""
    v = Violations()
    size = v.page_size("page_size", value)
    assert 1 <= size <= MAX_PAGE_SIZE
    if value < 0:
        assert _fields(v) == ["page_size"]
        assert size == DEFAULT_PAGE_SIZE
    else:
        assert v.items == []
        assert size == (DEFAULT_PAGE_SIZE if value == 0 else min(value, MAX_PAGE_SIZE))


def test_raise_if_any_names_every_field() -> None:
    """raise_if_any raises one INVALID_ARGUMENT that lists every violation in order, and nothing when clean."""
    Violations().raise_if_any()
    v = Violations()
    v.identifier("node_id", "BAD")
    v.text("reason", "x" * 1000)
    v.page_size("page_size", -5)
    with pytest.raises(InvalidArgument) as caught:
        v.raise_if_any()
    error = caught.value
    assert error.code is Code.INVALID_ARGUMENT
    assert error.reason == "INVALID_FIELD"
    assert [f.field for f in error.violations] == ["node_id", "reason", "page_size"]
    assert error.metadata == {"fields": "node_id, reason, page_size"}
    for field in ("node_id", "reason", "page_size"):
        assert field in error.message


def test_for_field_keeps_the_given_reason() -> None:
    """InvalidArgument.for_field carries one violation and the reason it is given."""
    error = InvalidArgument.for_field("page_token", "is malformed", reason="INVALID_PAGE_TOKEN")
    assert error.violations == (FieldViolation("page_token", "is malformed"),)
    assert error.reason == "INVALID_PAGE_TOKEN"
    assert str(error).startswith("INVALID_ARGUMENT: INVALID_PAGE_TOKEN")


def test_a_thousand_violations_report_ten_cut_short_and_count_the_rest() -> None:
    """One error reports at most ten violations, each path and description cut short, and counts them all:
    everything travels in response headers, which gRPC refuses past 8-16 KB."""
    v = Violations()
    for i in range(1000):
        v.add(f"series[{i}].fields[{'k' * 5000!r}]", "d" * 5000)
    assert v.count == 1000
    with pytest.raises(InvalidArgument) as caught:
        v.raise_if_any()
    error = caught.value
    assert len(error.violations) == 10
    assert [f.field.split(".")[0] for f in error.violations] == [f"series[{i}]" for i in range(10)]
    assert all(len(f.field) <= 80 and len(f.description) <= 160 for f in error.violations)
    assert error.violations[0].field.endswith("...")
    assert error.metadata["violations"] == "1000"
    assert len(error.metadata["fields"]) < 1000
    assert "and 997 more (1000 in all)" in error.message
    assert len(error.message) < 1000


def test_a_few_violations_are_reported_whole() -> None:
    """Under the caps nothing is cut and no count is added."""
    error = InvalidArgument.for_fields([FieldViolation("a", "x" * 160), FieldViolation("b", "y")])
    assert error.violations == (FieldViolation("a", "x" * 160), FieldViolation("b", "y"))
    assert error.metadata == {"fields": "a, b"}


@pytest.mark.parametrize(
    ("seconds", "nanos", "expected"),
    [
        (0, 0, 0),
        (1, 999_999_999, 1_999_999),
        (-1, 500_000_000, -500_000),
        (TIMESTAMP_MAX_SECONDS, 0, TIMESTAMP_MAX_SECONDS * 1_000_000),
        (TIMESTAMP_MIN_SECONDS, 0, TIMESTAMP_MIN_SECONDS * 1_000_000),
        (TIMESTAMP_MAX_SECONDS + 1, 0, None),
        (TIMESTAMP_MIN_SECONDS - 1, 0, None),
        (2**62, 0, None),
        (10, -5, None),
        (10, 1_000_000_000, None),
    ],
)
def test_timestamp_us_accepts_exactly_the_range_of_a_timestamp(seconds: int, nanos: int, expected: int | None) -> None:
    """Years 0001-9999 and nanos 0-999999999 convert; anything else names the field."""
    v = Violations()
    assert v.timestamp_us("start_time", seconds, nanos) == expected
    assert _fields(v) == ([] if expected is not None else ["start_time"])

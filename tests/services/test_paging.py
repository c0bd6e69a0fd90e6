"""Opaque page tokens: signed, scoped to one query, expiring, and never crashing on garbage."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import services.paging as paging
from services.errors import Code, InvalidArgument
from services.paging import MAX_TOKEN_LENGTH, TOKEN_TTL_US, Cursor, PageTokens, query_hash

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
SCOPE: dict[str, str | int] = {"list": "nodes", "state": 3, "gpu_model": 0, "zone": "zone-a"}


def _raw(token: str) -> bytes:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


def _encode_raw(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _assert_bad_token(error: InvalidArgument, field: str = "page_token") -> None:
    assert error.code is Code.INVALID_ARGUMENT
    assert error.reason == "INVALID_PAGE_TOKEN"
    assert [v.field for v in error.violations] == [field]


def test_round_trip_returns_the_cursor() -> None:
    """A token decodes, with the same scope, to exactly the cursor it was made from."""
    tokens = PageTokens(KEY)
    cursor = Cursor(1_733_000_000_123_456, "alloc-0123456789abcdef")
    token = tokens.encode(cursor, SCOPE)
    assert tokens.decode(token, SCOPE) == cursor


def test_token_is_url_safe_and_unpadded() -> None:
    """Tokens use only the URL-safe base64 alphabet and carry no '=' padding."""
    token = PageTokens(KEY).encode(Cursor(5, "node-001"), SCOPE)
    assert token
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_scope_key_order_does_not_matter() -> None:
    """The query hash is canonical: the same filters in another order decode the token."""
    tokens = PageTokens(KEY)
    token = tokens.encode(Cursor(1, "a"), SCOPE)
    reordered = dict(reversed(list(SCOPE.items())))
    assert tokens.decode(token, reordered) == Cursor(1, "a")
    assert query_hash(SCOPE) == query_hash(reordered)


def test_empty_token_means_first_page() -> None:
    """An empty page_token decodes to no cursor."""
    assert PageTokens(KEY).decode("", SCOPE) is None


def test_tampering_with_any_byte_fails() -> None:
    """Flipping any single bit in any byte of a token (MAC or payload) makes it INVALID_ARGUMENT."""
    tokens = PageTokens(KEY)
    raw = _raw(tokens.encode(Cursor(42, "node-042"), SCOPE))
    for position in range(len(raw)):
        for bit in (0x01, 0x80):
            tampered = bytearray(raw)
            tampered[position] ^= bit
            with pytest.raises(InvalidArgument) as caught:
                tokens.decode(_encode_raw(bytes(tampered)), SCOPE)
            _assert_bad_token(caught.value)


def test_truncated_or_extended_token_fails() -> None:
    """Dropping bytes from, or appending bytes to, a token makes it INVALID_ARGUMENT."""
    tokens = PageTokens(KEY)
    raw = _raw(tokens.encode(Cursor(42, "node-042"), SCOPE))
    for variant in (raw[:-1], raw[:31], raw[:32], raw + b"x", b"", raw[1:]):
        if not variant:
            continue
        with pytest.raises(InvalidArgument) as caught:
            tokens.decode(_encode_raw(variant), SCOPE)
        _assert_bad_token(caught.value)


def test_a_token_with_characters_added_fails() -> None:
    """The decoder would skip characters outside base64url and padding: a token with any added
    is not the token, though it decodes to the same signed bytes."""
    tokens = PageTokens(KEY)
    token = tokens.encode(Cursor(42, "node-042"), SCOPE)
    for variant in (token + "!!", token + "====", token + "~~", "." + token, token[:10] + "*" + token[10:]):
        with pytest.raises(InvalidArgument) as caught:
            tokens.decode(variant, SCOPE)
        _assert_bad_token(caught.value)


def test_other_scope_fails() -> None:
    """A token replayed with other filters or by another caller is INVALID_ARGUMENT."""
    tokens = PageTokens(KEY)
    token = tokens.encode(Cursor(1, "node-001"), SCOPE)
    for other in ({**SCOPE, "zone": "zone-b"}, {**SCOPE, "state": 0}, {"list": "tenants"}, {**SCOPE, "caller": "t"}):
        with pytest.raises(InvalidArgument) as caught:
            tokens.decode(token, other)
        _assert_bad_token(caught.value)
        assert "filters" in caught.value.message


def test_token_of_another_key_fails() -> None:
    """A token signed with another server's key is INVALID_ARGUMENT."""
    token = PageTokens(OTHER_KEY).encode(Cursor(1, "node-001"), SCOPE)
    with pytest.raises(InvalidArgument) as caught:
        PageTokens(KEY).decode(token, SCOPE)
    _assert_bad_token(caught.value)


def test_expired_token_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A token older than the TTL is INVALID_ARGUMENT; one just inside the TTL still decodes."""
    tokens = PageTokens(KEY)
    issued = 1_800_000_000_000_000
    monkeypatch.setattr(paging, "now_us", lambda: issued)
    token = tokens.encode(Cursor(7, "node-007"), SCOPE)
    monkeypatch.setattr(paging, "now_us", lambda: issued + TOKEN_TTL_US)
    assert tokens.decode(token, SCOPE) == Cursor(7, "node-007")
    monkeypatch.setattr(paging, "now_us", lambda: issued + TOKEN_TTL_US + 1)
    with pytest.raises(InvalidArgument) as caught:
        tokens.decode(token, SCOPE)
    _assert_bad_token(caught.value)
    assert "expired" in caught.value.message


def test_too_long_token_fails_before_decoding() -> None:
    """A token longer than MAX_TOKEN_LENGTH is INVALID_ARGUMENT."""
    with pytest.raises(InvalidArgument) as caught:
        PageTokens(KEY).decode("A" * (MAX_TOKEN_LENGTH + 1), SCOPE)
    _assert_bad_token(caught.value)


def test_field_path_names_the_request_field() -> None:
    """The violation names the field the caller passed in (field_path)."""
    with pytest.raises(InvalidArgument) as caught:
        PageTokens(KEY).decode("garbage", SCOPE, field_path="next.page_token")
    _assert_bad_token(caught.value, "next.page_token")


def test_short_key_is_refused() -> None:
    """A signing key shorter than 32 bytes is a ValueError."""
    with pytest.raises(ValueError, match="32 bytes"):
        PageTokens(b"k" * 31)


@pytest.mark.parametrize(
    "payload",
    [b"not json", b"[]", b"null", b"1", b'"str"', b"{}", b'{"v":1}', b"\xff\xfe", b'{"v":2,"t":1,"id":"a"}'],
)
def test_signed_but_malformed_payload_fails(payload: bytes) -> None:
    """Even a correctly signed payload that is not a well-formed cursor is INVALID_ARGUMENT."""
    mac = hmac.new(KEY, payload, hashlib.sha256).digest()
    with pytest.raises(InvalidArgument) as caught:
        PageTokens(KEY).decode(_encode_raw(mac + payload), SCOPE)
    _assert_bad_token(caught.value)


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=MAX_TOKEN_LENGTH + 50))
def test_random_strings_never_decode(token: str) -> None:
    """Any random string is refused with InvalidArgument, never decoded and never another exception."""
    with pytest.raises(InvalidArgument) as caught:
        PageTokens(KEY).decode(token, SCOPE)
    _assert_bad_token(caught.value)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=700))
def test_random_bytes_as_base64_never_decode(raw: bytes) -> None:
    """Random bytes, well-formed base64url, are refused with InvalidArgument."""
    with pytest.raises(InvalidArgument) as caught:
        PageTokens(KEY).decode(_encode_raw(raw), SCOPE)
    _assert_bad_token(caught.value)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=2**62), st.text(max_size=40))
def test_round_trip_any_cursor(created_us: int, last_id: str) -> None:
    """Any cursor (any time, any id text) survives encode/decode unchanged."""
    tokens = PageTokens(KEY)
    cursor = Cursor(created_us, last_id)
    assert tokens.decode(tokens.encode(cursor, SCOPE), SCOPE) == cursor

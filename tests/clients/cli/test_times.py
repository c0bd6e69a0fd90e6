"""The time and duration forms every time option of the ``gpucloud`` command takes."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from clients.cli.times import duration_option, parse_duration, parse_time, time_option


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", timedelta(0)),
        ("-1h", timedelta(hours=-1)),
        ("-1h30m", timedelta(hours=-1, minutes=-30)),
        ("-250ms", timedelta(milliseconds=-250)),
    ],
)
def test_relative_times(text: str, expected: timedelta) -> None:
    """Relative times count back from now."""
    now = datetime(2025, 1, 31, 12, tzinfo=UTC)
    assert parse_time(text, now=now) == now + expected


def test_absolute_times_and_durations() -> None:
    """RFC 3339 with or without a zone (UTC), epoch milliseconds, and compound durations; junk is refused."""
    now = datetime(2025, 1, 31, 12, tzinfo=UTC)
    assert parse_time("2025-01-30T10:00:00Z", now=now) == datetime(2025, 1, 30, 10, tzinfo=UTC)
    assert parse_time("2025-01-30T12:00:00+02:00", now=now) == datetime(2025, 1, 30, 10, tzinfo=UTC)
    assert parse_time("2025-01-30T10:00:00", now=now) == datetime(2025, 1, 30, 10, tzinfo=UTC)
    assert parse_time("1738231200000", now=now) == datetime(2025, 1, 30, 10, tzinfo=UTC)
    assert parse_duration("1h30m") == timedelta(minutes=90)
    for bad in ("", "5", "1x", "m5", "0s", "-5s"):
        with pytest.raises(ValueError, match=f"^{re.escape(repr(bad))} (is not a duration|must be longer than zero)"):
            parse_duration(bad)
    with pytest.raises(ValueError, match=r"^'yesterday' is not RFC 3339"):
        parse_time("yesterday", now=now)


def test_a_date_alone_is_midnight_utc() -> None:
    assert parse_time("2026-11-01", now=datetime.now(UTC)) == datetime(2026, 11, 1, tzinfo=UTC)


@pytest.mark.parametrize("text", ["-99999999999w", "99999999999999999999", "-300000000000000000000ms"])
def test_times_past_the_calendar_are_value_errors(text: str) -> None:
    """Out-of-range instants are refused as bad input, never an OverflowError traceback."""
    with pytest.raises(ValueError, match=text.lstrip("-")):
        parse_time(text, now=datetime(2025, 1, 31, 12, tzinfo=UTC))


def test_option_errors_name_the_option() -> None:
    with pytest.raises(ValueError, match=r"^--start: 'tomorrow' is not RFC 3339"):
        time_option("--start", "tomorrow", now=datetime.now(UTC))
    with pytest.raises(ValueError, match=r"^--step: '1y' is not a duration"):
        duration_option("--step", "1y")


def test_lower_case_t_and_z_are_rfc_3339() -> None:
    assert parse_time("2026-12-01t21:00:00z", now=datetime.now(UTC)) == datetime(2026, 12, 1, 21, tzinfo=UTC)


@pytest.mark.parametrize("text", ["-1x", "-0s", "-"])
def test_a_bad_relative_time_is_named_as_typed(text: str) -> None:
    with pytest.raises(ValueError, match=f"^{text!r} is not a time before now"):
        parse_time(text, now=datetime.now(UTC))


@pytest.mark.parametrize("text", ["20261201", "0", "1", "2026", "99999999999"])
def test_too_few_digits_for_epoch_milliseconds_are_refused(text: str) -> None:
    """``20261201`` is a date without dashes, not 1970-01-01T05:37Z: fewer than 12 digits are
    refused, naming the option and the forms that would work."""
    too_few = f"^--start: {re.escape(repr(text))} is too few digits for milliseconds since the epoch"
    with pytest.raises(ValueError, match=too_few) as refused:
        time_option("--start", text, now=datetime.now(UTC))
    message = str(refused.value)
    assert "RFC 3339" in message
    assert "2026-12-01T00:00:00Z" in message


def test_epoch_milliseconds_of_12_digits_or_more_are_read() -> None:
    now = datetime.now(UTC)
    assert parse_time("100000000000", now=now) == datetime(1973, 3, 3, 9, 46, 40, tzinfo=UTC)
    assert parse_time("1796083200000", now=now) == datetime(2026, 12, 1, tzinfo=UTC)

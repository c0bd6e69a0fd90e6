"""The forms every time option of the ``gpucloud`` command takes, parsed in one place.

An instant is RFC 3339 (``2025-01-31T12:00:00Z``, ``2025-01-31T14:00:00+02:00``; a time or
date without an offset is UTC, the zone billing periods and series are kept in), ``now``,
``-<duration>`` before now (``-1h``, ``-90s``, ``-1h30m``) or milliseconds since the epoch, at
least 12 digits (``1738231200000``). A duration is ``250ms``, ``30s``, ``5m``, ``1h30m``, ``2d``
or ``1w``.

Fewer digits are refused rather than read as milliseconds: ``20261201`` is far more likely a
date written without dashes than an instant in January 1970.

Files are stricter: the usage events and outages that ``gpucloud invoice --events`` reads must
carry an offset (accounting/loaders.py), since a file may come from anywhere.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

INSTANT_FORMS = "RFC 3339 (UTC if no offset), now, -1h or ms since the epoch (12+ digits)"

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w)")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# 12 digits of milliseconds reach back to 1973-03-03; anything shorter is taken for a mistake.
_EPOCH_MS_DIGITS = 12


def parse_duration(text: str) -> timedelta:
    """``30s``, ``5m``, ``1h30m``, ``250ms``, ``2d``: a positive duration; ValueError otherwise."""
    compact = text.strip().lower()
    parts = _DURATION.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"{text!r} is not a duration like 30s, 5m, 1h30m or 250ms")
    total = sum(int(n) * _UNITS_MS[u] for n, u in parts)
    if total <= 0:
        raise ValueError(f"{text!r} must be longer than zero")
    try:
        return timedelta(milliseconds=total)
    except OverflowError:
        raise ValueError(f"{text!r} is longer than any calendar allows") from None


def parse_time(text: str, *, now: datetime) -> datetime:
    """An instant in one of the module's forms, as an aware datetime; ValueError otherwise
    (also for fewer than 12 digits, which are not taken for milliseconds since the epoch)."""
    value = text.strip()
    if value.lower() == "now":
        return now
    if value.isdigit() and len(value) < _EPOCH_MS_DIGITS:
        raise ValueError(
            f"{text!r} is too few digits for milliseconds since the epoch (12 or more, e.g."
            " 1796083200000); give RFC 3339 for a date or time, e.g. 2026-12-01T00:00:00Z"
        )
    try:
        if value.startswith("-"):
            return now - parse_duration(value[1:])
        if value.isdigit():
            return _EPOCH + timedelta(milliseconds=int(value))
    except OverflowError:
        raise ValueError(f"{text!r} is outside the years 1-9999") from None
    except ValueError as error:
        # Name the whole value typed, minus sign included.
        raise ValueError(f"{text!r} is not a time before now like -1h or -90s: {error}") from None
    try:
        # RFC 3339 allows a lower-case t and z; no other letter can occur in it.
        moment = datetime.fromisoformat(value.upper())
    except ValueError:
        raise ValueError(f"{text!r} is not RFC 3339 (2025-01-31T12:00:00Z), 'now', -1h or ms since the epoch") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def require_order(first: datetime | None, last: datetime | None, start: str | None, end: str | None) -> None:
    """ValueError naming both options, as typed, when ``--end`` is not after ``--start``."""
    if first is not None and last is not None and last <= first:
        raise ValueError(f"--end {end!r} must be after --start {start!r}")


def time_option(option: str, text: str, *, now: datetime) -> datetime:
    """``parse_time`` of an option's value; the ValueError names the option."""
    try:
        return parse_time(text, now=now)
    except ValueError as error:
        raise ValueError(f"{option}: {error}") from None


def duration_option(option: str, text: str) -> timedelta:
    """``parse_duration`` of an option's value; the ValueError names the option."""
    try:
        return parse_duration(text)
    except ValueError as error:
        raise ValueError(f"{option}: {error}") from None

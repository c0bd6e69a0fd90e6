"""Billing periods: UTC calendar months named ``YYYY-MM``, each the half-open ``[start, end)``.

A rule module: no I/O, no gRPC. ``2026-11`` is ``[2026-11-01T00:00Z, 2026-12-01T00:00Z)``, so
the boundary instant belongs to exactly one period and nothing is billed twice or dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from accounting.model import Period, datetime_to_us, us_to_datetime

# [0-9], not \d: \d also matches other scripts' digits (fullwidth, Arabic-Indic).
_NAME = re.compile(r"([0-9]{4})-([0-9]{2})")
# Before the epoch there is no usage; past 9998-12 the next period has no four-digit name.
MIN_YEAR = 1970
MAX_YEAR = 9998


class BadPeriod(ValueError):
    """A period name that is not a valid ``YYYY-MM`` month; the message says why."""


@dataclass(frozen=True, order=True)
class BillingPeriod:
    """One calendar month, UTC. Orders chronologically."""

    year: int
    month: int

    def __post_init__(self) -> None:
        if not 1 <= self.month <= 12:
            raise BadPeriod(f"{self.name!r}: month must be 01-12")
        if not MIN_YEAR <= self.year <= MAX_YEAR:
            raise BadPeriod(f"{self.name!r}: year must be {MIN_YEAR}-{MAX_YEAR}")

    @property
    def name(self) -> str:
        """``YYYY-MM``, e.g. ``2026-11``."""
        return f"{self.year:04d}-{self.month:02d}"

    @property
    def start_us(self) -> int:
        """The first instant, 00:00 UTC on the 1st, in microseconds since the epoch."""
        return datetime_to_us(datetime(self.year, self.month, 1, tzinfo=UTC))

    @property
    def end_us(self) -> int:
        """The next month's ``start_us``: the first instant after the period (9998-12 has one
        too, though 9999-01 is no period)."""
        return datetime_to_us(datetime(self.year + self.month // 12, self.month % 12 + 1, 1, tzinfo=UTC))

    @property
    def span(self) -> Period:
        """The accounting library's half-open period."""
        return Period(self.start_us, self.end_us)

    def next(self) -> BillingPeriod:
        """The month after (December is followed by January of the next year)."""
        return BillingPeriod(self.year + self.month // 12, self.month % 12 + 1)

    def previous(self) -> BillingPeriod:
        """The month before (January is preceded by December of the previous year); BadPeriod
        for ``FIRST_PERIOD``, which has none."""
        return BillingPeriod(self.year - (self.month == 1), (self.month - 2) % 12 + 1)

    def __str__(self) -> str:
        return self.name


FIRST_PERIOD = BillingPeriod(MIN_YEAR, 1)


def parse_period(text: str) -> BillingPeriod:
    """``"2026-11"`` -> the November 2026 period; BadPeriod says what is wrong otherwise."""
    match = _NAME.fullmatch(text)
    if match is None:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise BadPeriod(f"{shown!r} is not a period; use YYYY-MM, e.g. 2026-11")
    return BillingPeriod(int(match[1]), int(match[2]))


def period_of(at_us: int) -> BillingPeriod:
    """The period that contains the instant ``at_us``."""
    moment = us_to_datetime(at_us)
    return BillingPeriod(moment.year, moment.month)

"""Pairs and clips right, but credits no outage: the tenant pays for time its GPU was down."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from accounting import reference
from accounting.facts import Facts
from accounting.model import Outage, Period, Rates, UsageEvent


def compute_facts(events: Sequence[UsageEvent], rates: Rates, period: Period, outages: Iterable[Outage] = ()) -> Facts:
    """Wrong: the outages are never read."""
    return reference.compute_facts(events, rates, period, ())

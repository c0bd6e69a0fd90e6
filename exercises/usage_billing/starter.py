"""Bill GPU time from raw start/stop events: write ``compute_facts``; `gpucloud exercises check
usage-billing --impl THIS_FILE` runs the suite. The types and the anomaly constructors are the
library's: import them, as below."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from accounting.facts import Facts
from accounting.model import Outage, Period, Rates, UsageEvent


def compute_facts(events: Sequence[UsageEvent], rates: Rates, period: Period, outages: Iterable[Outage] = ()) -> Facts:
    """Every fact billing needs: usage per (tenant, model, price class), credits, anomalies, and
    where each event went."""
    raise NotImplementedError

"""Bills only starts that a stop closes: a tenant still running at the period's end pays nothing."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from accounting import reference
from accounting.facts import Facts
from accounting.model import EventKind, Outage, Period, Rates, UsageEvent


def compute_facts(events: Sequence[UsageEvent], rates: Rates, period: Period, outages: Iterable[Outage] = ()) -> Facts:
    """Wrong: a start with no stop after it on its (tenant, allocation, GPU) is left out."""

    def stopped(begin: UsageEvent) -> bool:
        return any(
            e.kind is EventKind.STOP
            and (e.tenant_id, e.allocation_id, e.gpu_uuid) == (begin.tenant_id, begin.allocation_id, begin.gpu_uuid)
            and e.at_us >= begin.at_us
            for e in events
        )

    kept = [e for e in events if e.kind is EventKind.STOP or stopped(e)]
    return reference.compute_facts(kept, rates, period, outages)

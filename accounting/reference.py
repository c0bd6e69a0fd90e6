"""The invoice rules as a plain sort-and-scan in Python.

This is the oracle the DuckDB engine is tested against, and the long interview exercise:
read it top to bottom; every rule of docs/billing.md appears once, in these steps:

1. De-duplicate by event_id: the first copy in input order stands.
2. Pair starts and stops per (tenant, allocation, GPU) in time order.
3. Clip each interval to the period.
4. Per tenant and GPU: union the intervals, give on-demand precedence over spot, credit outages.
5. Per GPU: find stretches where two tenants held it at once.
6. Per commitment: the time integral of the GPUs in use beyond the commitment.

A GPU is the pair (gpu_uuid, gpu_model): the control plane takes the model from inventory, so
a UUID has one model; a log that names one UUID under two models is billed as two GPUs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from accounting import anomalies
from accounting.facts import Facts, LineKey, UsageKey, differing_fields, unpriced_usage
from accounting.intervals import Interval, excess_over, intersect, subtract, total, union
from accounting.model import Anomaly, AnomalyKind, EventKind, Outage, Period, PriceClass, Rates, UsageEvent

GpuKey = tuple[str, str]  # (gpu_uuid, gpu_model)


@dataclass(frozen=True)
class Held:
    """A paired interval that falls in the period, clipped to it."""

    start: UsageEvent
    stop: UsageEvent | None  # None: never stopped, billed to the period end
    span: Interval

    @property
    def event_ids(self) -> tuple[str, ...]:
        """The start's event id, and the stop's when there is one."""
        return (self.start.event_id,) if self.stop is None else (self.start.event_id, self.stop.event_id)

    @property
    def gpu(self) -> GpuKey:
        """The GPU: ``(gpu_uuid, gpu_model)``."""
        return (self.start.gpu_uuid, self.start.gpu_model)


class _Ledger:
    """Where each event went, and the anomalies found so far."""

    def __init__(self, period: Period) -> None:
        self.period = period
        self.billed: set[str] = set()
        self.outside: set[str] = set()
        self.excluded: dict[str, AnomalyKind] = {}
        self.anomalies: list[Anomaly] = []
        # Later copies of an event id (they have no id of their own to file them under).
        self.outside_copies = 0
        self.copies_by_kind: Counter[AnomalyKind] = Counter()

    def in_period(self, at_us: int) -> bool:
        return self.period.start_us <= at_us < self.period.end_us

    def exclude(self, events: Sequence[UsageEvent], anomaly: Anomaly, at_us: int) -> None:
        """Events kept out of billing: an anomaly if their time is in the period, else outside it."""
        if self.in_period(at_us):
            self.anomalies.append(anomaly)
            self.excluded.update((event.event_id, anomaly.kind) for event in events)
        else:
            self.outside.update(event.event_id for event in events)

    def excluded_by_kind(self) -> Counter[AnomalyKind]:
        return Counter(self.excluded.values()) + self.copies_by_kind


def compute_facts(events: Sequence[UsageEvent], rates: Rates, period: Period, outages: Iterable[Outage] = ()) -> Facts:
    """Every fact billing needs, by sorting and scanning in Python."""
    ledger = _Ledger(period)
    standing, copies = _deduplicate(events)  # step 1
    held = _pair(standing, ledger)  # steps 2 and 3
    by_tenant_gpu: dict[tuple[str, GpuKey], list[Held]] = defaultdict(list)
    for interval in held:
        by_tenant_gpu[(interval.start.tenant_id, interval.gpu)].append(interval)
    down = _outages_by_gpu(outages, period)

    # Step 4, per tenant and GPU.
    usage_us: Counter[UsageKey] = Counter()
    credited_us: Counter[str] = Counter()
    on_demand_gpus: dict[tuple[str, str], dict[str, list[Interval]]] = defaultdict(dict)
    coverage: dict[GpuKey, dict[str, list[Interval]]] = defaultdict(dict)
    overlap_us = 0
    for (tenant_id, (gpu_uuid, gpu_model)), intervals in sorted(by_tenant_gpu.items()):
        held_at_all = union(i.span for i in intervals)
        on_demand = union(i.span for i in intervals if i.start.price_class is PriceClass.ON_DEMAND)
        outage = down.get(gpu_uuid, [])
        # On-demand takes precedence: spot time is what the tenant held beyond its on-demand time.
        billed = {
            PriceClass.ON_DEMAND: subtract(on_demand, outage),
            PriceClass.SPOT: subtract(subtract(held_at_all, on_demand), outage),
        }
        for klass in {i.start.price_class for i in intervals}:
            usage_us[(tenant_id, gpu_model, klass)] += total(billed[klass])
        credited_us[tenant_id] += sum(i.length for i in intersect(held_at_all, outage))
        on_demand_gpus[(tenant_id, gpu_model)][gpu_uuid] = billed[PriceClass.ON_DEMAND]
        coverage[(gpu_uuid, gpu_model)][tenant_id] = held_at_all

        overlap = sum(i.span.length for i in intervals) - total(held_at_all)
        overlap_us += overlap
        if overlap:
            event_ids = [e for i in _overlapping(intervals) for e in i.event_ids]
            ledger.anomalies.append(anomalies.same_tenant_overlap(tenant_id, gpu_uuid, gpu_model, event_ids, overlap))

    cross_us = _cross_tenant(coverage, by_tenant_gpu, ledger)  # step 5
    overage = {  # step 6: n(t) counts each GPU once, after union and credits
        (c.tenant_id, c.gpu_model): excess_over(on_demand_gpus.get((c.tenant_id, c.gpu_model), {}), c.gpus)
        for c in rates.commitments
    }
    _report_copies(copies, ledger)

    unpriced: dict[LineKey, tuple[str, ...]] = {}
    for group, line in unpriced_usage(rates, usage_us, overage).items():
        unpriced[line] = tuple(
            sorted(
                e
                for i in held
                if (i.start.tenant_id, i.start.gpu_model, i.start.price_class) == group
                for e in i.event_ids
            )
        )

    return Facts(
        usage_us=dict(usage_us),
        overage_us=overage,
        credited_us=dict(credited_us),
        unpriced_event_ids=unpriced,
        anomalies=tuple(ledger.anomalies),
        events_in=len(events),
        events_billed=len(ledger.billed),
        events_outside_period=len(ledger.outside) + ledger.outside_copies,
        events_in_anomalies=dict(ledger.excluded_by_kind()),
        interval_us=sum(i.span.length for i in held),
        same_tenant_overlap_us=overlap_us,
        cross_tenant_overlap_us=cross_us,
    )


def _deduplicate(
    events: Sequence[UsageEvent],
) -> tuple[list[UsageEvent], dict[str, tuple[UsageEvent, list[UsageEvent]]]]:
    """The first copy of each event id, in input order; and the later copies by event id."""
    first: dict[str, UsageEvent] = {}
    repeats: dict[str, list[UsageEvent]] = defaultdict(list)
    for event in events:
        if event.event_id in first:
            repeats[event.event_id].append(event)
        else:
            first[event.event_id] = event
    return list(first.values()), {event_id: (first[event_id], later) for event_id, later in repeats.items()}


def _pair(standing: Sequence[UsageEvent], ledger: _Ledger) -> list[Held]:
    """Starts paired with stops per (tenant, allocation, GPU), clipped to the period."""
    streams: dict[tuple[str, str, str], list[UsageEvent]] = defaultdict(list)
    for event in standing:
        streams[(event.tenant_id, event.allocation_id, event.gpu_uuid)].append(event)
    held: list[Held] = []
    period = Interval(ledger.period.start_us, ledger.period.end_us)
    for stream in streams.values():
        # Start before stop at equal times (a GPU handed back and forth at one instant pairs
        # as zero-length), then event id so the order is total.
        stream.sort(key=lambda e: (e.at_us, e.kind is EventKind.STOP, e.event_id))
        opened: UsageEvent | None = None
        orphans: list[UsageEvent] = []  # stops while nothing was started
        # The orphan stop right before ``opened``: its own stop, if nothing else stops it.
        stamped_early: UsageEvent | None = None
        previous: UsageEvent | None = None
        for event in stream:
            if event.kind is EventKind.START and opened is not None:
                anomaly = anomalies.duplicate_start(event, opened.event_id, opened.at_us)
                ledger.exclude([event], anomaly, event.at_us)
            elif event.kind is EventKind.START:
                opened = event
                stamped_early = previous if orphans and orphans[-1] is previous else None
            elif opened is None:
                orphans.append(event)
            else:
                held.extend(_close(opened, event, period, ledger))
                opened = stamped_early = None
            previous = event
        if opened is not None and stamped_early is not None:
            orphans.pop()  # no stop came after ``opened``: the last orphan is ``stamped_early``
            anomaly = anomalies.stop_before_start(opened, stamped_early.event_id, stamped_early.at_us)
            ledger.exclude([stamped_early, opened], anomaly, opened.at_us)
        elif opened is not None:
            held.extend(_close(opened, None, period, ledger))
        for stop in orphans:
            ledger.exclude([stop], anomalies.stop_without_start(stop), stop.at_us)
    return held


def _close(start: UsageEvent, stop: UsageEvent | None, period: Interval, ledger: _Ledger) -> list[Held]:
    """The interval a start and its stop (or the period end) make, if it falls in the period."""
    if stop is not None and stop.at_us == start.at_us:
        ledger.exclude([start, stop], anomalies.zero_length(start, stop.event_id), start.at_us)
        return []
    end = period.end if stop is None else stop.at_us
    span = Interval(max(start.at_us, period.start), min(end, period.end))
    pair = [start] if stop is None else [start, stop]
    if span.length == 0:
        ledger.outside.update(e.event_id for e in pair)
        return []
    ledger.billed.update(e.event_id for e in pair)
    if stop is None:
        ledger.anomalies.append(anomalies.open_at_period_end(start, span.length))
    return [Held(start, stop, span)]


def _outages_by_gpu(outages: Iterable[Outage], period: Period) -> dict[str, list[Interval]]:
    """Each GPU's outages, clipped to the period and unioned (a repeated report credits once)."""
    by_gpu: dict[str, list[Interval]] = defaultdict(list)
    for outage in outages:
        by_gpu[outage.gpu_uuid].append(
            Interval(max(outage.start_us, period.start_us), min(outage.end_us, period.end_us))
        )
    return {gpu: union(spans) for gpu, spans in by_gpu.items()}


def _overlapping(intervals: Sequence[Held]) -> list[Held]:
    """The intervals that overlap another one of the list.

    Sorted by start, an interval overlaps an earlier one exactly when it starts before the
    latest end so far, and a later one exactly when the next start is before its end.
    """
    ordered = sorted(intervals, key=lambda i: (i.span.start, i.span.end, i.start.event_id))
    found = []
    latest_end: int | None = None
    for n, interval in enumerate(ordered):
        overlaps_earlier = latest_end is not None and interval.span.start < latest_end
        overlaps_later = n + 1 < len(ordered) and ordered[n + 1].span.start < interval.span.end
        if overlaps_earlier or overlaps_later:
            found.append(interval)
        latest_end = interval.span.end if latest_end is None else max(latest_end, interval.span.end)
    return found


def _cross_tenant(
    coverage: dict[GpuKey, dict[str, list[Interval]]],
    by_tenant_gpu: dict[tuple[str, GpuKey], list[Held]],
    ledger: _Ledger,
) -> int:
    """Report each tenant that held a GPU while another tenant did; the shared microseconds."""
    shared_total = 0
    for gpu, tenants in sorted(coverage.items()):
        for tenant_id, mine in sorted(tenants.items()):
            others = [span for other, spans in tenants.items() if other != tenant_id for span in spans]
            shared = intersect(mine, others)
            if not shared:
                continue
            shared_us = sum(i.length for i in shared)
            shared_total += shared_us
            with_whom = [other for other, spans in tenants.items() if other != tenant_id and intersect(mine, spans)]
            event_ids = [e for i in by_tenant_gpu[(tenant_id, gpu)] if intersect([i.span], shared) for e in i.event_ids]
            ledger.anomalies.append(
                anomalies.cross_tenant_overlap(tenant_id, gpu[0], gpu[1], event_ids, shared_us, with_whom)
            )
    return shared_total


def _report_copies(copies: dict[str, tuple[UsageEvent, list[UsageEvent]]], ledger: _Ledger) -> None:
    """Later copies of an event id follow the first copy's fate: reported with it, or outside."""
    for event_id, (first, repeats) in copies.items():
        if event_id in ledger.outside:
            ledger.outside_copies += len(repeats)
            continue
        masks = [differing_fields(first, repeat) for repeat in repeats]
        exact = masks.count(0)
        if exact:
            ledger.anomalies.append(anomalies.duplicate_event(first, exact))
            ledger.copies_by_kind[AnomalyKind.DUPLICATE_EVENT] += exact
        mask = 0
        for m in masks:
            mask |= m
        if mask:
            ledger.anomalies.append(anomalies.conflicting_duplicate(first, len(repeats) - exact, mask))
            ledger.copies_by_kind[AnomalyKind.CONFLICTING_DUPLICATE] += len(repeats) - exact

"""Rules of tenant visibility: a tenant reads a node's metrics only for the time it held the node.

The hold comes from the usage events billing reads (a ``start`` per GPU at placement, a
``stop`` when the cancel is accepted), so a tenant sees exactly the time it is billed for: from
the placement to the cancel. The scrub after it is the provider's time, and what the node
reports then is not the tenant's to read. A start without a stop is a hold that lasts until
now. A stop without a start is an anomaly billing reports; it grants nothing here.

A part-node allocation (GPUs, a MIG slice or a soft share of one node) holds GPUs, not the
node: the tenant reads each such GPU's series for the time it held that GPU alone (a GPU's
slices and shares are one tenant's at a time), never the node's own series, another tenant's
GPUs, or another tenant's time on its GPU. A node it held both whole and in part reads as held
in part: that hides its own whole-node time there rather than show another tenant's GPUs.

Times: usage events are microseconds, samples milliseconds. A hold [start_us, stop_us) becomes
[ceil(start_us / 1000), ceil(stop_us / 1000)) in ms, which keeps exactly the samples whose
instant lies in the hold. Merging and cutting to a window are billing's interval algebra
(accounting/intervals.py); here intervals stay ``(start_ms, end_ms)`` pairs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from accounting import Interval as Span
from accounting import intersect_intervals, union_intervals
from services.metrics.selection import Window

# [start_ms, end_ms)
Interval = tuple[int, int]


@dataclass(frozen=True)
class HoldRecord:
    """One node's hold in one allocation, as its usage events say: first start, last stop."""

    allocation_id: str
    node_id: str
    start_us: int | None
    stop_us: int | None
    # A part-node allocation's GPU indexes on the node; () for a whole node.
    gpus: tuple[int, ...] = ()


def _ceil_ms(micros: int) -> int:
    return -(-micros // 1000)


def _pairs(spans: Iterable[Span]) -> tuple[Interval, ...]:
    # Metrics code keeps intervals as plain pairs: they key dicts and unpack in the read loops.
    return tuple((span.start, span.end) for span in spans)


def merge(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    """Sorted, non-empty, non-overlapping intervals covering the same instants."""
    return _pairs(union_intervals(Span(start, end) for start, end in intervals))


def _span(record: HoldRecord, now_us: int) -> Interval | None:
    """The record's hold in ms, open until now; None for a stop without a start."""
    if record.start_us is None:
        return None
    stop_us = now_us if record.stop_us is None else record.stop_us
    return (_ceil_ms(record.start_us), _ceil_ms(stop_us))


def hold_intervals(records: Iterable[HoldRecord], *, now_us: int) -> dict[str, tuple[Interval, ...]]:
    """Per node, the merged intervals (ms) during which the tenant held it."""
    by_node: dict[str, list[Interval]] = {}
    for record in records:
        if (span := _span(record, now_us)) is not None:
            by_node.setdefault(record.node_id, []).append(span)
    return {node: merged for node, spans in by_node.items() if (merged := merge(spans))}


def gpu_hold_intervals(records: Iterable[HoldRecord], *, now_us: int) -> dict[tuple[str, int], tuple[Interval, ...]]:
    """Per (node, GPU index) the part-node allocations held, the merged intervals (ms) during
    which the tenant held that GPU."""
    by_gpu: dict[tuple[str, int], list[Interval]] = {}
    for record in records:
        if (span := _span(record, now_us)) is not None:
            for gpu in record.gpus:
                by_gpu.setdefault((record.node_id, gpu), []).append(span)
    return {key: merged for key, spans in by_gpu.items() if (merged := merge(spans))}


def within(intervals: Sequence[Interval], window: Window) -> tuple[Interval, ...]:
    """The parts of ``intervals`` inside the window, merged."""
    spans = (Span(start, end) for start, end in intervals)
    return _pairs(intersect_intervals(spans, [Span(window.start_ms, window.end_ms)]))


def envelope(by_node: Mapping[str, Sequence[Interval]]) -> Window | None:
    """The smallest window covering every interval, or None when there are none."""
    spans = [span for intervals in by_node.values() for span in intervals]
    if not spans:
        return None
    return Window(min(s for s, _ in spans), max(e for _, e in spans))

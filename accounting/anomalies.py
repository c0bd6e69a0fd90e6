"""How each anomaly is worded: one constructor per kind, shared by both engines.

An engine decides *that* something is an anomaly and hands over the evidence; the text, the
fields filled in and the order of event ids are fixed here, so the two engines' reports can be
compared for equality.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from accounting.facts import field_names
from accounting.model import Anomaly, AnomalyKind, PriceClass, UsageEvent, rfc3339, us_to_seconds

NO_SECONDS = us_to_seconds(0)


def _of(
    kind: AnomalyKind,
    event: UsageEvent,
    detail: str,
    *,
    event_ids: tuple[str, ...] | None = None,
    seconds: Decimal = NO_SECONDS,
) -> Anomaly:
    """An anomaly about ``event``'s allocation on its GPU, for the tenant that holds it; its
    evidence is ``event`` alone unless ``event_ids`` says otherwise."""
    ids = (event.event_id,) if event_ids is None else event_ids
    return Anomaly(kind, event.tenant_id, event.gpu_uuid, event.allocation_id, ids, seconds, detail)


def duplicate_event(standing: UsageEvent, repeats: int) -> Anomaly:
    """``repeats`` more copies of an event with the same payload: ignored."""
    return _of(
        AnomalyKind.DUPLICATE_EVENT, standing, f"{repeats} exact repeat(s) of this {standing.kind} event ignored"
    )


def conflicting_duplicate(standing: UsageEvent, repeats: int, mask: int) -> Anomaly:
    """``repeats`` more copies of an event id whose payload differs (``mask``: which fields)."""
    fields = ", ".join(field_names(mask))
    detail = f"{repeats} repeat(s) of this event id differ in {fields}; the first in input order stands"
    return _of(AnomalyKind.CONFLICTING_DUPLICATE, standing, detail)


def duplicate_start(event: UsageEvent, standing_id: str, standing_at_us: int) -> Anomaly:
    """A start while the allocation already held the GPU: the earlier start stands."""
    detail = (
        f"start at {rfc3339(event.at_us)} while already started by {standing_id} at "
        f"{rfc3339(standing_at_us)}; the earlier start stands"
    )
    return _of(AnomalyKind.DUPLICATE_START, event, detail)


def stop_before_start(start: UsageEvent, stop_id: str, stop_at_us: int) -> Anomaly:
    """A start that nothing stops, right after a stop with nothing to stop in its allocation and
    GPU: the stop was stamped before its start (a clock behind). Neither is billed: billing the
    start to the period's end, every period, would charge for time the release ended."""
    detail = (
        f"stop at {rfc3339(stop_at_us)}, {us_to_seconds(start.at_us - stop_at_us)} s before its start at "
        f"{rfc3339(start.at_us)} (a clock behind?); not billed"
    )
    return _of(AnomalyKind.STOP_BEFORE_START, start, detail, event_ids=(stop_id, start.event_id))


def stop_without_start(event: UsageEvent) -> Anomaly:
    """A stop with no open start for its allocation and GPU: nothing is billed for it."""
    detail = f"stop at {rfc3339(event.at_us)} with no open start for this allocation and GPU; not billed"
    return _of(AnomalyKind.STOP_WITHOUT_START, event, detail)


def zero_length(start: UsageEvent, stop_event_id: str) -> Anomaly:
    """A start and its stop at the same instant: nothing to bill."""
    detail = f"start and stop at the same instant {rfc3339(start.at_us)}"
    return _of(AnomalyKind.ZERO_LENGTH, start, detail, event_ids=(start.event_id, stop_event_id))


def open_at_period_end(start: UsageEvent, billed_us: int) -> Anomaly:
    """A start never stopped in the log: billed to the period end (informational)."""
    detail = f"started at {rfc3339(start.at_us)} with no stop in the log; billed to the period end"
    return _of(AnomalyKind.OPEN_AT_PERIOD_END, start, detail, seconds=us_to_seconds(billed_us))


def same_tenant_overlap(
    tenant_id: str, gpu_uuid: str, gpu_model: str, event_ids: Iterable[str], overlap_us: int
) -> Anomaly:
    """Intervals of one tenant overlapping on one GPU: the overlap is billed once."""
    return Anomaly(
        AnomalyKind.SAME_TENANT_OVERLAP,
        tenant_id,
        gpu_uuid,
        None,
        tuple(sorted(event_ids)),
        us_to_seconds(overlap_us),
        f"overlapping intervals of this tenant on this {gpu_model}; the overlap is billed once",
    )


def cross_tenant_overlap(
    tenant_id: str,
    gpu_uuid: str,
    gpu_model: str,
    event_ids: Iterable[str],
    shared_us: int,
    other_tenant_ids: Iterable[str],
) -> Anomaly:
    """A GPU held by this and another tenant at once: an isolation breach, each billed its own time."""
    others = tuple(sorted(other_tenant_ids))
    return Anomaly(
        AnomalyKind.CROSS_TENANT_OVERLAP,
        tenant_id,
        gpu_uuid,
        None,
        tuple(sorted(event_ids)),
        us_to_seconds(shared_us),
        f"this {gpu_model} was held by {len(others)} other tenant(s) at the same time; isolation breach, "
        "each tenant is billed its own time",
        others,
    )


def unpriced_interval(
    tenant_id: str, gpu_model: str, klass: PriceClass, event_ids: Iterable[str], gpu_us: int
) -> Anomaly:
    """Usage on a line with no rate: the line's amount is null and the total excludes it."""
    rate_class = PriceClass.ON_DEMAND if klass is PriceClass.OVERAGE else klass
    return Anomaly(
        AnomalyKind.UNPRICED_INTERVAL,
        tenant_id,
        None,
        None,
        tuple(sorted(event_ids)),
        us_to_seconds(gpu_us),
        f"no {rate_class} rate for {gpu_model}: the {klass} line has no amount and the total excludes it",
    )

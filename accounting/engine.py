"""The invoice rules in DuckDB SQL: the engine for logs too large for Python loops.

Data goes in through Arrow; each run has its own in-memory connection using every core. The
statements are in ``accounting.queries``; this module runs them in order and reads back
integer microseconds and the evidence of anomalies. Money is computed afterwards, in Python,
by ``accounting.pricing``, exactly as for the reference engine.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from accounting import anomalies, queries
from accounting.facts import Facts, LineKey, UsageKey, unpriced_usage
from accounting.model import (
    Anomaly,
    AnomalyKind,
    EventKind,
    Outage,
    Period,
    PriceClass,
    Rates,
    UsageEvent,
)

EVENTS_SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("event_id", pa.string()),
        ("tenant_id", pa.string()),
        ("allocation_id", pa.string()),
        ("gpu_uuid", pa.string()),
        ("gpu_model", pa.string()),
        ("kind", pa.string()),
        ("at_us", pa.int64()),
        ("price_class", pa.string()),
    ]
)
OUTAGES_SCHEMA = pa.schema(
    [("seq", pa.int64()), ("gpu_uuid", pa.string()), ("start_us", pa.int64()), ("end_us", pa.int64())]
)


def events_to_arrow(events: Sequence[UsageEvent]) -> pa.Table:
    """The log as an Arrow table in EVENTS_SCHEMA; ``seq`` is the input position."""
    # One typed array per column; the enums are str subclasses, so they convert as their values.
    return pa.table(
        [
            pa.array(range(len(events)), pa.int64()),
            pa.array([e.event_id for e in events], pa.string()),
            pa.array([e.tenant_id for e in events], pa.string()),
            pa.array([e.allocation_id for e in events], pa.string()),
            pa.array([e.gpu_uuid for e in events], pa.string()),
            pa.array([e.gpu_model for e in events], pa.string()),
            pa.array([e.kind for e in events], pa.string()),
            pa.array([e.at_us for e in events], pa.int64()),
            pa.array([e.price_class for e in events], pa.string()),
        ],
        schema=EVENTS_SCHEMA,
    )


def outages_to_arrow(outages: Sequence[Outage]) -> pa.Table:
    """Outages as an Arrow table in OUTAGES_SCHEMA."""
    return pa.table(
        {
            "seq": range(len(outages)),
            "gpu_uuid": [o.gpu_uuid for o in outages],
            "start_us": [o.start_us for o in outages],
            "end_us": [o.end_us for o in outages],
        },
        schema=OUTAGES_SCHEMA,
    )


def connect() -> duckdb.DuckDBPyConnection:
    """A fresh in-memory database using every core."""
    con = duckdb.connect(":memory:")
    con.execute(f"SET threads = {os.cpu_count() or 1}")
    return con


def compute_facts(events: Sequence[UsageEvent], rates: Rates, period: Period, outages: Iterable[Outage] = ()) -> Facts:
    """Every fact billing needs, computed in DuckDB."""
    return facts_from_arrow(events_to_arrow(events), rates, period, outages_to_arrow(tuple(outages)))


def facts_from_arrow(events: pa.Table, rates: Rates, period: Period, outages: pa.Table | None = None) -> Facts:
    """As :func:`compute_facts`, from Arrow tables in EVENTS_SCHEMA and OUTAGES_SCHEMA.

    The way in for large logs: no Python object per event.
    """
    con = connect()
    try:
        return _Run(
            con, events, outages if outages is not None else OUTAGES_SCHEMA.empty_table(), rates, period
        ).facts()
    finally:
        con.close()


def _bare(intervals: pa.Table | duckdb.DuckDBPyRelation) -> pa.Table:
    if isinstance(intervals, pa.Table):
        return intervals.select(["gpu_id", "start_us", "end_us"])
    return intervals.select("gpu_id, start_us, end_us").to_arrow_table()


def union_seconds(intervals: pa.Table | duckdb.DuckDBPyRelation) -> pa.Table:
    """Per-GPU union of bare intervals: the core of billing, for benchmarks and audits.

    ``intervals`` has columns ``gpu_id`` (any sortable type), ``start_us`` and ``end_us``
    (integers, half-open); an Arrow table, or a relation of any DuckDB connection. Returns an
    Arrow table ``(gpu_id, union_us)`` sorted by gpu_id: the covered time per GPU, overlaps
    counted once, in the input's unit. One sort and one window pass (see queries.UNION_BY_GPU).
    """
    con = connect()
    try:
        con.register("arrow_intervals", _bare(intervals))
        # A real table, so rowid gives the window a unique tiebreaker.
        con.execute("CREATE TEMP TABLE bare_intervals AS SELECT * FROM arrow_intervals")
        return con.sql(queries.UNION_BY_GPU.format(table="bare_intervals") + " ORDER BY gpu_id").to_arrow_table()
    finally:
        con.close()


def intersection_seconds(
    usage: pa.Table | duckdb.DuckDBPyRelation, outages: pa.Table | duckdb.DuckDBPyRelation
) -> pa.Table:
    """Per-GPU time covered by both ``usage`` and ``outages`` (the credit), each unioned first.

    Same columns as :func:`union_seconds`; returns ``(gpu_id, intersection_us)`` for every GPU
    with an outage, sorted by gpu_id. A GPU reported twice is not credited twice.
    """
    con = connect()
    try:
        con.register("arrow_usage", _bare(usage))
        con.register("arrow_outages", _bare(outages))
        con.execute("CREATE TEMP TABLE bare_outages AS SELECT * FROM arrow_outages")
        con.execute("CREATE TEMP TABLE bare_usage AS SELECT * FROM arrow_usage SEMI JOIN bare_outages USING (gpu_id)")
        con.execute("CREATE TEMP TABLE bare_both AS SELECT * FROM bare_usage UNION ALL SELECT * FROM bare_outages")
        return con.sql(queries.INTERSECTION_BY_GPU).to_arrow_table()
    finally:
        con.close()


class _Dictionary:
    """Integer codes for the strings of one kind (tenants, GPUs, ...), shared by every input."""

    def __init__(self, *columns: pa.Array | pa.ChunkedArray) -> None:
        arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
        # Hash-based (no sort): codes are in order of first appearance, which nothing relies on.
        encoded = pc.dictionary_encode(pa.concat_arrays([a.cast(pa.string()) for a in arrays]))
        self.strings: list[str] = encoded.dictionary.to_pylist()
        self.codes: list[pa.Array] = []
        offset = 0
        for array in arrays:
            self.codes.append(encoded.indices.slice(offset, len(array)))
            offset += len(array)

    def __getitem__(self, code: int) -> str:
        return self.strings[code]


class _Run:
    """One engine run: the statements of accounting.queries on one connection."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, events: pa.Table, outages: pa.Table, rates: Rates, period: Period
    ):
        self.con = con
        self.rates = rates
        self.events_in = events.num_rows
        commitments = rates.commitments
        self.tenants = _Dictionary(events["tenant_id"], pa.array([c.tenant_id for c in commitments], pa.string()))
        self.models = _Dictionary(events["gpu_model"], pa.array([c.gpu_model for c in commitments], pa.string()))
        self.gpus = _Dictionary(events["gpu_uuid"], outages["gpu_uuid"])
        self.allocations = _Dictionary(events["allocation_id"])
        con.register(
            "raw_events",
            pa.table(
                {
                    "seq": events["seq"].cast(pa.int64()),
                    "event_id": events["event_id"].cast(pa.string()),
                    "tenant": self.tenants.codes[0],
                    "alloc": self.allocations.codes[0],
                    "gpu": self.gpus.codes[0],
                    "model": self.models.codes[0],
                    "is_stop": pc.cast(pc.equal(events["kind"], EventKind.STOP.value), pa.int8()),
                    "at_us": events["at_us"].cast(pa.int64()),
                    "is_spot": pc.cast(pc.equal(events["price_class"], PriceClass.SPOT.value), pa.int8()),
                }
            ),
        )
        con.register(
            "raw_outages",
            pa.table(
                {
                    "seq": outages["seq"].cast(pa.int64()),
                    "gpu": self.gpus.codes[1],
                    "start_us": outages["start_us"].cast(pa.int64()),
                    "end_us": outages["end_us"].cast(pa.int64()),
                }
            ),
        )
        con.register(
            "commitments",
            pa.table(
                {
                    "tenant": self.tenants.codes[1],
                    "model": self.models.codes[1],
                    "gpus": pa.array([c.gpus for c in commitments], pa.int64()),
                }
            ),
        )
        con.execute(f"SET VARIABLE p0 = {int(period.start_us)}::BIGINT")
        con.execute(f"SET VARIABLE p1 = {int(period.end_us)}::BIGINT")

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self.con.execute(sql).fetchall()

    def event(self, row: Sequence[Any]) -> UsageEvent:
        """A UsageEvent from the columns of queries.EVENT_COLUMNS."""
        event_id, tenant, alloc, gpu, model, is_stop, at_us, is_spot = row[:8]
        return UsageEvent(
            event_id,
            self.tenants[tenant],
            self.allocations[alloc],
            self.gpus[gpu],
            self.models[model],
            EventKind.STOP if is_stop else EventKind.START,
            at_us,
            PriceClass.SPOT if is_spot else PriceClass.ON_DEMAND,
        )

    def tenant_gpu(self, tenant: int, gpu: int, model: int) -> tuple[str, str, str]:
        return self.tenants[tenant], self.gpus[gpu], self.models[model]

    def facts(self) -> Facts:
        for statement in (
            queries.REPEATS,
            queries.STEPS,
            queries.PAIRS,
            queries.FATES,
            queries.HELD,
            queries.OUTAGE_SPANS,
            queries.EDGES,
            queries.SEGMENTS,
            queries.PER_GPU,
            queries.BREACHES,
        ):
            self.con.execute(statement)

        fates = dict(self.rows(queries.FATE_COUNTS))
        usage: dict[UsageKey, int] = {
            (self.tenants[t], self.models[m], PriceClass.SPOT if spot else PriceClass.ON_DEMAND): us
            for t, m, spot, us in self.rows(queries.USAGE)
        }
        overage = (
            {(self.tenants[t], self.models[m]): us for t, m, us in self.rows(queries.OVERAGE)}
            if self.rates.commitments
            else {}
        )
        interval_us, overlap_us = self.rows(queries.TOTALS)[0]
        breaches = self.rows(queries.BREACH_SECONDS)
        # Clean logs are the common case: skip the queries for evidence that cannot exist.
        found = self.event_anomalies(set(fates))
        if overlap_us:
            found += self.overlap_anomalies()
        if breaches:
            found += self.breach_anomalies(breaches)
        return Facts(
            usage_us=usage,
            overage_us=overage,
            credited_us={self.tenants[t]: us for t, us in self.rows(queries.CREDITED)},
            unpriced_event_ids=self.unpriced_event_ids(usage, overage),
            anomalies=tuple(found),
            events_in=self.events_in,
            events_billed=fates.pop("billed", 0),
            events_outside_period=fates.pop("outside", 0),
            events_in_anomalies={AnomalyKind(kind): count for kind, count in fates.items()},
            interval_us=interval_us,
            same_tenant_overlap_us=overlap_us,
            cross_tenant_overlap_us=sum(row[3] for row in breaches),
        )

    def event_anomalies(self, fates: set[str]) -> list[Anomaly]:
        """Copies, duplicate starts, orphan stops, zero-length and open pairs in the period.

        ``fates`` are the fates that occurred (FATE_COUNTS): none, no query for that kind.
        """
        found = []
        copies = {AnomalyKind.DUPLICATE_EVENT.value, AnomalyKind.CONFLICTING_DUPLICATE.value} & fates
        for row in self.rows(queries.COPY_ANOMALIES) if copies else []:
            standing, exact, conflicting, mask = self.event(row), row[8], row[9], row[10]
            if exact:
                found.append(anomalies.duplicate_event(standing, exact))
            if conflicting:
                found.append(anomalies.conflicting_duplicate(standing, conflicting, mask))
        for row in self.rows(queries.DUPLICATE_STARTS) if AnomalyKind.DUPLICATE_START.value in fates else []:
            found.append(anomalies.duplicate_start(self.event(row), row[8], row[9]))
        for row in self.rows(queries.ORPHAN_STOPS) if AnomalyKind.STOP_WITHOUT_START.value in fates else []:
            found.append(anomalies.stop_without_start(self.event(row)))
        for row in self.rows(queries.PAIR_ANOMALIES):
            start, stop_id, billed_us = self.event(row), row[8], row[9]
            if stop_id is None:
                found.append(anomalies.open_at_period_end(start, billed_us))
            else:
                found.append(anomalies.zero_length(start, stop_id))
        return found

    def overlap_anomalies(self) -> list[Anomaly]:
        """SAME_TENANT_OVERLAP per tenant and GPU, with the intervals that overlap."""
        event_ids: dict[tuple[int, int, int], list[str]] = defaultdict(list)
        for tenant, gpu, model, start_id, stop_id in self.rows(queries.OVERLAPPING):
            event_ids[(tenant, gpu, model)].extend(_ids(start_id, stop_id))
        return [
            anomalies.same_tenant_overlap(*self.tenant_gpu(tenant, gpu, model), event_ids[(tenant, gpu, model)], us)
            for tenant, gpu, model, us in self.rows(queries.OVERLAP_SECONDS)
        ]

    def breach_anomalies(self, breaches: list[tuple[Any, ...]]) -> list[Anomaly]:
        """CROSS_TENANT_OVERLAP per tenant and shared GPU (``breaches``: BREACH_SECONDS rows)."""
        partners: dict[tuple[int, int, int], list[str]] = defaultdict(list)
        for tenant, gpu, model, other in self.rows(queries.BREACH_PARTNERS):
            partners[(tenant, gpu, model)].append(self.tenants[other])
        event_ids: dict[tuple[int, int, int], list[str]] = defaultdict(list)
        for tenant, gpu, model, start_id, stop_id in self.rows(queries.BREACH_EVENTS):
            event_ids[(tenant, gpu, model)].extend(_ids(start_id, stop_id))
        return [
            anomalies.cross_tenant_overlap(
                *self.tenant_gpu(tenant, gpu, model),
                event_ids[(tenant, gpu, model)],
                shared_us,
                partners[(tenant, gpu, model)],
            )
            for tenant, gpu, model, shared_us in breaches
        ]

    def unpriced_event_ids(
        self, usage: dict[UsageKey, int], overage: dict[tuple[str, str], int]
    ) -> dict[LineKey, tuple[str, ...]]:
        """Event ids behind the lines with no rate (usually none, so usually no query)."""
        unpriced = unpriced_usage(self.rates, usage, overage)
        if not unpriced:
            return {}
        tenant_codes = {name: code for code, name in enumerate(self.tenants.strings)}
        model_codes = {name: code for code, name in enumerate(self.models.strings)}
        groups = pa.table(
            {
                "tenant": pa.array([tenant_codes[t] for t, _, _ in unpriced], pa.int32()),
                "model": pa.array([model_codes[m] for _, m, _ in unpriced], pa.int32()),
                "is_spot": pa.array([int(c is PriceClass.SPOT) for _, _, c in unpriced], pa.int8()),
            }
        )
        self.con.register("unpriced_groups", groups)
        found: dict[LineKey, list[str]] = defaultdict(list)
        for tenant, model, is_spot, start_id, stop_id in self.rows(queries.UNPRICED_EVENTS):
            key = (self.tenants[tenant], self.models[model], PriceClass.SPOT if is_spot else PriceClass.ON_DEMAND)
            found[unpriced[key]].extend(_ids(start_id, stop_id))
        return {line: tuple(sorted(ids)) for line, ids in found.items()}


def _ids(start_id: str, stop_id: str | None) -> tuple[str, ...]:
    return (start_id,) if stop_id is None else (start_id, stop_id)

"""The invoice rules in DuckDB SQL: the engine for logs too large for Python loops.

Data goes in through Arrow; each run has its own connection (``accounting.connection``) to the
process's in-memory database, which uses every core. The statements are in
``accounting.queries``; this module runs them in order and reads back integer microseconds and
the evidence of anomalies. Money is computed afterwards, in Python, by ``accounting.pricing``,
exactly as for the reference engine.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from accounting import anomalies, queries
from accounting.connection import connect
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
from accounting.packing import PackedKey
from accounting.union import intersection_seconds, union_seconds

__all__ = [
    "EVENTS_SCHEMA",
    "OUTAGES_SCHEMA",
    "compute_facts",
    "connect",
    "events_to_arrow",
    "facts_from_arrow",
    "intersection_seconds",
    "outages_to_arrow",
    "union_seconds",
]

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
    # One pass that reads each event once and appends its fields to eight lists, then one typed
    # Arrow array per list (the enums are str subclasses, so they convert as their values).
    # Reading column by column touches every event eight times, and a log's events are often
    # scattered in memory: 1.3-1.6 s for 1M events on a 2-core VM, against 2.3 s column by
    # column, and 2.9 s column by column before UsageEvent had slots.
    columns: list[list[Any]] = [[] for _ in range(8)]
    event_id, tenant_id, allocation_id, gpu_uuid, gpu_model, kind, at_us, price_class = (c.append for c in columns)
    for event in events:
        event_id(event.event_id)
        tenant_id(event.tenant_id)
        allocation_id(event.allocation_id)
        gpu_uuid(event.gpu_uuid)
        gpu_model(event.gpu_model)
        kind(event.kind)
        at_us(event.at_us)
        price_class(event.price_class)
    fields = list(EVENTS_SCHEMA)
    arrays = [pa.array(values, field.type) for values, field in zip(columns, fields[1:], strict=True)]
    return pa.table([pa.array(range(len(events)), pa.int64()), *arrays], schema=EVENTS_SCHEMA)


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
        # Numbers for the (tenant, GPU) pairs and the GPUs, packed with times into the sweeps'
        # sort keys (accounting.packing): a GPU is its UUID with its model.
        gpu_models, n_gpu_models = _numbered(
            (self.gpus.codes[0], len(self.gpus.strings)), (self.models.codes[0], len(self.models.strings))
        )
        tenant_gpus, n_tenant_gpus = _numbered(
            (self.tenants.codes[0], len(self.tenants.strings)), (gpu_models, n_gpu_models)
        )
        self.tenant_gpu_key = PackedKey.fitting(n_tenant_gpus, period.start_us, period.end_us)
        self.gpu_key = PackedKey.fitting(n_gpu_models, period.start_us, period.end_us)
        # As many pairs as GPUs: no GPU was ever held by two tenants (always so for the online
        # invoice, which reads one tenant's events), so there is no breach to look for.
        self.shared_gpus = n_tenant_gpus > n_gpu_models
        self.commitment_key = PackedKey.fitting(len(commitments), period.start_us, period.end_us)
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
                    "tg": tenant_gpus,
                    "gm": gpu_models,
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
                    "cid": pa.array(range(len(commitments)), pa.int64()),
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
        statements = [
            queries.REPEATS,
            queries.STEPS,
            queries.STAMPED_EARLY,
            queries.PAIRS,
            queries.FATES,
            queries.HELD,
            queries.OUTAGE_SPANS,
            queries.TENANT_GPUS,
            queries.edges(self.tenant_gpu_key),
            queries.segments(self.tenant_gpu_key),
            queries.PER_GPU,
        ]
        if self.shared_gpus:
            statements.append(queries.breaches(self.gpu_key))
        for statement in statements:
            self.con.execute(statement)

        fates = dict(self.rows(queries.FATE_COUNTS))
        usage: dict[UsageKey, int] = {
            (self.tenants[t], self.models[m], PriceClass.SPOT if spot else PriceClass.ON_DEMAND): us
            for t, m, spot, us in self.rows(queries.USAGE)
        }
        overage = (
            {(self.tenants[t], self.models[m]): us for t, m, us in self.rows(queries.overage(self.commitment_key))}
            if self.rates.commitments
            else {}
        )
        interval_us, overlap_us = self.rows(queries.TOTALS)[0]
        breaches = self.rows(queries.BREACH_SECONDS) if self.shared_gpus else []
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
        """Copies, duplicate starts, orphan stops, stops before their starts, zero-length and open
        pairs in the period.

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
        for row in self.rows(queries.STOPS_BEFORE_STARTS) if AnomalyKind.STOP_BEFORE_START.value in fates else []:
            found.append(anomalies.stop_before_start(self.event(row), row[8], row[9]))
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


def _numbered(*columns: tuple[pa.Array, int]) -> tuple[pa.Array, int]:
    """Dense numbers (from 0, in order of first appearance) for the distinct tuples of integer
    codes, each given with its bound; and how many there are."""
    codes, bound = columns[0][0].cast(pa.int64()), columns[0][1]
    for other, other_bound in columns[1:]:
        # Combining two numbers below n at a time keeps the product below n**2: no overflow.
        combined = pc.add(pc.multiply_checked(codes, other_bound), other.cast(pa.int64()))
        encoded = pc.dictionary_encode(combined)
        codes, bound = encoded.indices.cast(pa.int64()), len(encoded.dictionary)
    return codes, bound


def _ids(start_id: str, stop_id: str | None) -> tuple[str, ...]:
    return (start_id,) if stop_id is None else (start_id, stop_id)

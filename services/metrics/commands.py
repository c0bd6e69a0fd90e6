"""Writing and reading metrics: who may, which nodes exist, which time a tenant may see.

Visibility: operators read every node. A tenant reads a node only for the time it held it
(services/metrics/holds.py); naming a node it never held, or one that does not exist, is
NOT_FOUND (the two look the same, on purpose); a node it held, but not during the window,
simply has no samples. An agent writes only for its own node.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import tsdb
from services.auth.principal import Principal, Role, tenant_scope
from services.clock import now_us
from services.errors import NotFound, PermissionDenied, ResourceExhausted
from services.metrics import reads
from services.metrics import repository as repo
from services.metrics.answer_size import answer_bytes
from services.metrics.batch import SeriesBatch
from services.metrics.holds import gpu_hold_intervals, hold_intervals, within
from services.metrics.outliers import BUSY_FIELD, BUSY_UTIL_PCT, GpuFigure, Outlier, PeerGroup, below_median
from services.metrics.sample_times import SampleTimes
from services.metrics.samples import SampleStore, SeriesData
from services.metrics.selection import Aggregation, Selector, Window
from services.nodes.commands import check_speaks_for
from services.store.engine import Database

# Points one answer may carry: with short labels, about 4 MiB.
MAX_QUERY_POINTS = 200_000
# Bytes one answer may take on the wire (an upper bound, services/metrics/answer_size.py): labels
# travel once per series, so a wide selector can pass 4 MiB with few points. The Python client's
# receive limit (clients/async_client.py, DEFAULT_MAX_RECEIVE_BYTES) is set to match; a client
# left at gRPC's default of 4 MiB refuses answers between the two.
MAX_ANSWER_BYTES = 16 * 1024 * 1024
# Answers of more series than this are sized (and encoded, services/metrics/proto.py) on a
# worker thread: some microseconds a series would hold up every other call on the event loop.
SERIES_SIZED_ON_LOOP = 2_000


@dataclass(frozen=True)
class QueryResult:
    """The series a query returns and what reading them cost."""

    series: list[SeriesData]
    stats: tsdb.QueryStats

    @property
    def points(self) -> int:
        """Points returned, over every series."""
        return sum(len(s.timestamps_ms) for s in self.series)


class KnownNodes:
    """Node ids known to exist. Nodes are never deleted (a retired node stays), so a positive
    answer can be cached for good and a write does not cost a database read per push."""

    def __init__(self, store: Database) -> None:
        self._store = store
        self._known: set[str] = set()

    async def missing(self, node_ids: frozenset[str]) -> list[str]:
        """The ids among ``node_ids`` that name no registered node, sorted."""
        unknown = node_ids - self._known
        if unknown:
            self._known |= await self._store.query(repo.existing_nodes(unknown))
        return sorted(node_ids - self._known)


class Metrics:
    """The metrics use cases over the database (nodes, holds) and the sample store."""

    def __init__(self, store: Database, samples: SampleStore, *, maintenance_seconds: float) -> None:
        """``maintenance_seconds``: how often the maintenance pass that applies the store's
        retention runs (services/metrics/maintenance.py); a write keeps clear of what it deletes."""
        self._store = store
        self._samples = samples
        self._nodes = KnownNodes(store)
        self._maintenance_interval_ms = math.ceil(maintenance_seconds * 1000)

    def sample_times(self, now_ms: int) -> SampleTimes:
        """The times a write at the server's clock ``now_ms`` may carry: none that the store's
        retention deletes at the next maintenance pass, none too far ahead."""
        return SampleTimes(now_ms, self._samples.retention_ms, self._maintenance_interval_ms)

    async def write(self, principal: Principal, batch: SeriesBatch) -> int:
        """Append a checked batch (only for existing nodes, an agent only for its own); return
        how many samples were new (a resent batch adds none)."""
        for node_id in sorted(batch.node_ids):
            check_speaks_for(principal, node_id)
        missing = await self._nodes.missing(batch.node_ids)
        if missing:
            raise NotFound.of("node", missing[0], field_path=batch.node_paths[missing[0]])
        return await self._samples.write(batch)

    async def query(self, principal: Principal, selector: Selector, window: Window) -> QueryResult:
        """Raw samples of the selected series in the window; a tenant's only from the time it held each node.

        NOT_FOUND for a named node the caller cannot see; RESOURCE_EXHAUSTED (QUERY_TOO_LARGE) for a result of
        more than ``MAX_QUERY_POINTS`` or ``MAX_ANSWER_BYTES``.
        """
        visible = await self._visible(principal, selector, window)
        if visible is None:
            series, stats = await self._samples.read(partial(reads.query_all, selector=selector, window=window))
        elif not visible.holds and not visible.gpus:
            return QueryResult([], tsdb.QueryStats())
        else:
            read = partial(reads.query_held, selector=selector, holds=visible.holds, gpus=visible.gpus)
            series, stats = await self._samples.read(read)
        return await _bounded(QueryResult(series, stats), "narrow the window or the selector, or use QueryRange")

    async def query_range(
        self, principal: Principal, selector: Selector, window: Window, step_ms: int, aggregation: Aggregation
    ) -> QueryResult:
        """One ``aggregation`` per step of the selected series in the window; visibility and errors as ``query``."""
        visible = await self._visible(principal, selector, window)
        if visible is None:
            read = partial(
                reads.query_range_all, selector=selector, window=window, step_ms=step_ms, aggregation=aggregation
            )
        elif not visible.holds and not visible.gpus:
            return QueryResult([], tsdb.QueryStats())
        else:
            read = partial(
                reads.query_range_held,
                selector=selector,
                window=window,
                step_ms=step_ms,
                aggregation=aggregation,
                holds=visible.holds,
                gpus=visible.gpus,
            )
        series, stats = await self._samples.read(read)
        return await _bounded(QueryResult(series, stats), "narrow the window or the selector, or use a longer step")

    async def outliers(self, field: str, window: Window, k: float) -> tuple[list[PeerGroup], list[Outlier]]:
        """GPUs whose average ``field`` over the window sits more than ``k`` spreads below the
        median of their peers (services/metrics/outliers.py), and the peer groups judged.
        Operators only (the auth policy): it compares every node of the fleet."""
        selector = Selector(fields=tuple(sorted({field, BUSY_FIELD})))
        step_ms = window.end_ms - window.start_ms
        read = partial(
            reads.query_range_all, selector=selector, window=window, step_ms=step_ms, aggregation=Aggregation.AVG
        )
        (series, _), models = await asyncio.gather(self._samples.read(read), self._store.query(repo.node_models()))
        # Per-GPU Python work: 80,000 GPUs would hold the event loop for a tenth of a second.
        return await asyncio.to_thread(_judge, series, models, field, k)

    async def _visible(self, principal: Principal, selector: Selector, window: Window) -> Visible | None:
        """None when the caller sees everything; else, per node, its held intervals in the
        window, and the GPUs of the nodes it held only part of."""
        tenant_id = tenant_scope(principal)
        if tenant_id is None:
            if principal.role is not Role.OPERATOR:
                # policy.py lets only operators and tenants read; this keeps it so if that changes.
                raise PermissionDenied(
                    reason="ROLE_NOT_ALLOWED",
                    message=f"role {principal.role} may not read metrics",
                    metadata={"role": principal.role},
                )
            missing = await self._nodes.missing(frozenset(selector.node_ids))
            if missing:
                raise NotFound.of("node", missing[0], field_path=_node_field(selector, missing[0]))
            return None
        records = await self._store.query(repo.hold_records(tenant_id, selector.node_ids))
        now = now_us()
        by_gpu = gpu_hold_intervals([r for r in records if r.gpus], now_us=now)
        in_part = {node_id for node_id, _ in by_gpu}
        # A node also held in part reads as held in part (holds.py).
        whole = hold_intervals([r for r in records if not r.gpus], now_us=now)
        held = {n: spans for n, spans in whole.items() if n not in in_part}
        for node_id in selector.node_ids:
            if node_id not in held and node_id not in in_part:
                raise NotFound.of("node", node_id, field_path=_node_field(selector, node_id))
        return Visible(
            {node_id: inside for node_id, spans in held.items() if (inside := within(spans, window))},
            {key: inside for key, spans in by_gpu.items() if (inside := within(spans, window))},
        )


class Visible(NamedTuple):
    """What a tenant may read: per node, the intervals in the window it held it; per node it
    held only part of, the GPU indexes it held there."""

    holds: reads.Holds
    gpus: reads.HeldGpus


async def _bounded(result: QueryResult, advice: str) -> QueryResult:
    """The result, unless it has more points, or takes more bytes, than one response may carry."""
    if result.points > MAX_QUERY_POINTS:
        raise ResourceExhausted(
            reason="QUERY_TOO_LARGE",
            message=f"the query matched {result.points} points; at most {MAX_QUERY_POINTS} are returned: {advice}",
            metadata={"matched": str(result.points), "limit": str(MAX_QUERY_POINTS)},
        )
    many = len(result.series) > SERIES_SIZED_ON_LOOP
    size = await asyncio.to_thread(answer_bytes, result.series) if many else answer_bytes(result.series)
    if size > MAX_ANSWER_BYTES:
        raise ResourceExhausted(
            reason="QUERY_TOO_LARGE",
            message=(
                f"the answer of {len(result.series)} series would take up to {size} bytes; "
                f"at most {MAX_ANSWER_BYTES} bytes are returned: narrow the selector or the window"
            ),
            metadata={"estimated_bytes": str(size), "limit_bytes": str(MAX_ANSWER_BYTES)},
        )
    return result


def _node_field(selector: Selector, node_id: str) -> str:
    return f"selector.node_ids[{selector.node_ids.index(node_id)}]"


def _judge(
    series: list[SeriesData], models: dict[str, str], field: str, k: float
) -> tuple[list[PeerGroup], list[Outlier]]:
    """The outliers of ``field`` among the window averages read (``Metrics.outliers``)."""
    averages: dict[str, dict[tuple[str, int], float]] = {field: {}, BUSY_FIELD: {}}
    for found in series:
        labels, value = found.labels, float(found.values[0]) if len(found.values) else math.nan
        gpu = labels.get(tsdb.GPU)
        if gpu is None or math.isnan(value) or labels[tsdb.FIELD] not in averages:
            continue
        averages[labels[tsdb.FIELD]][(labels[tsdb.NODE], int(gpu))] = value
    figures = [
        GpuFigure(node_id, gpu, models[node_id], value, averages[BUSY_FIELD].get((node_id, gpu), 0.0) >= BUSY_UTIL_PCT)
        for (node_id, gpu), value in sorted(averages[field].items())
        if node_id in models
    ]
    return below_median(figures, k)

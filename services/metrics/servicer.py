"""MetricsService: protobuf in, domain calls (services/metrics/commands.py), protobuf out. No rules live here."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import numpy as np

from gpucloud.v1 import metrics_pb2, metrics_pb2_grpc
from services.auth.principal import current_principal
from services.clock import now_us
from services.metrics.batch import GpuFields, LabeledSeries, NodePush, build_batch
from services.metrics.commands import SERIES_SIZED_ON_LOOP, Metrics, QueryResult
from services.metrics.selection import Aggregation, Selector, Window, check_selector, check_step, check_window
from services.validation import Violations

Context = grpc.aio.ServicerContext[Any, Any]

AGGREGATION_FROM_PROTO = {metrics_pb2.Aggregation.Value(f"AGGREGATION_{a.name}"): a for a in Aggregation}
_KNOWN_AGGREGATIONS = frozenset(AGGREGATION_FROM_PROTO)


def _selector(message: metrics_pb2.SeriesSelector) -> Selector:
    return Selector(tuple(message.node_ids), tuple(message.gpu_indexes), tuple(message.fields))


def _stats(result: QueryResult) -> metrics_pb2.QueryStats:
    return metrics_pb2.QueryStats(
        **result.stats.as_dict(), series_returned=len(result.series), points_returned=result.points
    )


def _series(result: QueryResult) -> list[metrics_pb2.Series]:
    return [
        metrics_pb2.Series(labels=s.labels, timestamps_ms=s.timestamps_ms.tolist(), values=s.values.tolist())
        for s in result.series
    ]


async def _encoded(result: QueryResult) -> list[metrics_pb2.Series]:
    """The result's series as messages; built on a worker thread when there are many."""
    if len(result.series) > SERIES_SIZED_ON_LOOP:
        return await asyncio.to_thread(_series, result)
    return _series(result)


class MetricsServicer(metrics_pb2_grpc.MetricsServiceServicer):
    """MetricsService: turns requests into checked batches, selectors and windows for ``Metrics``."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    async def WriteSamples(
        self, request: metrics_pb2.WriteSamplesRequest, context: Context
    ) -> metrics_pb2.WriteSamplesResponse:
        """Check and write a batch, all or nothing; returns the samples that were new and the batch's series count."""
        nodes = [
            NodePush(n.node_id, n.timestamp_ms, [GpuFields(g.gpu_index, dict(g.fields)) for g in n.gpus])
            for n in request.nodes
        ]
        series = [
            LabeledSeries(
                dict(s.labels),
                np.array(s.timestamps_ms, dtype=np.int64),
                np.array(s.values, dtype=np.float64),
            )
            for s in request.series
        ]
        batch = build_batch(nodes, series, self._metrics.sample_times(now_us() // 1000))
        written = await self._metrics.write(current_principal(), batch)
        return metrics_pb2.WriteSamplesResponse(samples_written=written, series_written=len(batch.runs))

    async def Query(self, request: metrics_pb2.QueryRequest, context: Context) -> metrics_pb2.QueryResponse:
        """Read raw samples of the selected series in a window."""
        selector, window = _selector(request.selector), Window(request.start_ms, request.end_ms)
        v = Violations()
        check_selector(v, selector)
        check_window(v, window)
        v.raise_if_any()
        result = await self._metrics.query(current_principal(), selector, window)
        return metrics_pb2.QueryResponse(series=await _encoded(result), stats=_stats(result))

    async def QueryRange(
        self, request: metrics_pb2.QueryRangeRequest, context: Context
    ) -> metrics_pb2.QueryRangeResponse:
        """Read one aggregate per step of the selected series in a window."""
        selector, window = _selector(request.selector), Window(request.start_ms, request.end_ms)
        v = Violations()
        check_selector(v, selector)
        check_window(v, window)
        check_step(v, window, request.step_ms)
        v.enum("aggregation", request.aggregation, _KNOWN_AGGREGATIONS)
        v.raise_if_any()
        aggregation = AGGREGATION_FROM_PROTO[request.aggregation]
        result = await self._metrics.query_range(current_principal(), selector, window, request.step_ms, aggregation)
        return metrics_pb2.QueryRangeResponse(series=await _encoded(result), stats=_stats(result))

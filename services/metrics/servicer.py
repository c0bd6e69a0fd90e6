"""MetricsService: protobuf in, domain calls (services/metrics/commands.py), protobuf out. No rules live here."""

from __future__ import annotations

from typing import Any

import grpc

from gpucloud.v1 import metrics_pb2, metrics_pb2_grpc
from services.auth.principal import current_principal
from services.clock import now_us
from services.metrics.batch import build_batch, check_field_name
from services.metrics.commands import Metrics
from services.metrics.proto import (
    AGGREGATION_FROM_PROTO,
    encoded_series,
    labeled_series_from_proto,
    outliers_to_proto,
    pushes_from_proto,
    selector_from_proto,
    stats_to_proto,
)
from services.metrics.selection import Window, check_selector, check_step, check_window
from services.validation import Violations

Context = grpc.aio.ServicerContext[Any, Any]

_KNOWN_AGGREGATIONS = frozenset(AGGREGATION_FROM_PROTO)
# ListOutliers' k: how many spreads below the median, when the request leaves it unset, and at most.
DEFAULT_K = 3.0
MAX_K = 100.0


class MetricsServicer(metrics_pb2_grpc.MetricsServiceServicer):
    """MetricsService: turns requests into checked batches, selectors and windows for ``Metrics``."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    async def WriteSamples(
        self, request: metrics_pb2.WriteSamplesRequest, context: Context
    ) -> metrics_pb2.WriteSamplesResponse:
        """Check and write a batch, all or nothing; returns the samples that were new and the batch's series count."""
        nodes, series = pushes_from_proto(request.nodes), labeled_series_from_proto(request.series)
        batch = build_batch(nodes, series, self._metrics.sample_times(now_us() // 1000))
        written = await self._metrics.write(current_principal(), batch)
        return metrics_pb2.WriteSamplesResponse(samples_written=written, series_written=len(batch.runs))

    async def Query(self, request: metrics_pb2.QueryRequest, context: Context) -> metrics_pb2.QueryResponse:
        """Read raw samples of the selected series in a window."""
        selector, window = selector_from_proto(request.selector), Window(request.start_ms, request.end_ms)
        v = Violations()
        check_selector(v, selector)
        check_window(v, window)
        v.raise_if_any()
        result = await self._metrics.query(current_principal(), selector, window)
        return metrics_pb2.QueryResponse(series=await encoded_series(result), stats=stats_to_proto(result))

    async def QueryRange(
        self, request: metrics_pb2.QueryRangeRequest, context: Context
    ) -> metrics_pb2.QueryRangeResponse:
        """Read one aggregate per step of the selected series in a window."""
        selector, window = selector_from_proto(request.selector), Window(request.start_ms, request.end_ms)
        v = Violations()
        check_selector(v, selector)
        check_window(v, window)
        check_step(v, window, request.step_ms)
        v.enum("aggregation", request.aggregation, _KNOWN_AGGREGATIONS)
        v.raise_if_any()
        aggregation = AGGREGATION_FROM_PROTO[request.aggregation]
        result = await self._metrics.query_range(current_principal(), selector, window, request.step_ms, aggregation)
        return metrics_pb2.QueryRangeResponse(series=await encoded_series(result), stats=stats_to_proto(result))

    async def ListOutliers(
        self, request: metrics_pb2.ListOutliersRequest, context: Context
    ) -> metrics_pb2.ListOutliersResponse:
        """GPUs far below the median of their peers for one field over a window."""
        window = Window(request.start_ms, request.end_ms)
        v = Violations()
        check_field_name(v, "field", request.field)
        check_window(v, window)
        if not (request.k == 0 or 0 < request.k <= MAX_K):
            v.add("k", f"must be above 0 and at most {MAX_K:g} (got {request.k}); leave it unset for {DEFAULT_K:g}")
        v.raise_if_any()
        k = request.k or DEFAULT_K
        groups, outliers = await self._metrics.outliers(request.field, window, k)
        return outliers_to_proto(request.field, k, groups, outliers)

"""The protobuf forms of metrics requests and answers (translation only; batch.py and
selection.py check what comes in)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np

import tsdb
from gpucloud.v1 import metrics_pb2
from services.metrics.batch import GpuFields, LabeledSeries, NodePush
from services.metrics.commands import SERIES_SIZED_ON_LOOP, QueryResult
from services.metrics.outliers import Outlier, PeerGroup
from services.metrics.selection import Aggregation, Selector
from services.nodes.inventory import GpuModel
from services.nodes.proto import GPU_MODEL_TO_PROTO

AGGREGATION_FROM_PROTO = {metrics_pb2.Aggregation.Value(f"AGGREGATION_{a.name}"): a for a in Aggregation}
# The store's read counters that the API's QueryStats carries, under the same names.
_STORE_COUNTERS = tuple(
    f.name for f in dataclasses.fields(tsdb.QueryStats) if f.name in metrics_pb2.QueryStats.DESCRIPTOR.fields_by_name
)


def pushes_from_proto(nodes: Iterable[metrics_pb2.NodeSamples]) -> list[NodePush]:
    """A write's node pushes, unchecked."""
    return [
        NodePush(n.node_id, n.timestamp_ms, [GpuFields(g.gpu_index, dict(g.fields)) for g in n.gpus]) for n in nodes
    ]


def labeled_series_from_proto(series: Iterable[metrics_pb2.SeriesSamples]) -> list[LabeledSeries]:
    """A write's labelled columnar series, unchecked."""
    return [
        LabeledSeries(dict(s.labels), np.array(s.timestamps_ms, dtype=np.int64), np.array(s.values, dtype=np.float64))
        for s in series
    ]


def selector_from_proto(message: metrics_pb2.SeriesSelector) -> Selector:
    """The series a query names, unchecked."""
    return Selector(tuple(message.node_ids), tuple(message.gpu_indexes), tuple(message.fields))


def stats_to_proto(result: QueryResult) -> metrics_pb2.QueryStats:
    """What a query read and what it returns."""
    counters = {name: getattr(result.stats, name) for name in _STORE_COUNTERS}
    return metrics_pb2.QueryStats(**counters, series_returned=len(result.series), points_returned=result.points)


def series_to_proto(result: QueryResult) -> list[metrics_pb2.Series]:
    """The result's series as messages."""
    return [
        metrics_pb2.Series(labels=s.labels, timestamps_ms=s.timestamps_ms.tolist(), values=s.values.tolist())
        for s in result.series
    ]


async def encoded_series(result: QueryResult) -> list[metrics_pb2.Series]:
    """The result's series as messages; built on a worker thread when there are many."""
    if len(result.series) > SERIES_SIZED_ON_LOOP:
        return await asyncio.to_thread(series_to_proto, result)
    return series_to_proto(result)


def outliers_to_proto(
    field: str, k: float, groups: Sequence[PeerGroup], outliers: Sequence[Outlier]
) -> metrics_pb2.ListOutliersResponse:
    """ListOutliers' answer: the peer groups judged and the outliers, most deviant first."""
    return metrics_pb2.ListOutliersResponse(
        field=field,
        k=k,
        groups=[
            metrics_pb2.PeerGroup(
                gpu_model=GPU_MODEL_TO_PROTO[GpuModel(g.gpu_model)],
                busy=g.busy,
                gpus=g.gpus,
                median=g.median,
                spread=g.spread,
            )
            for g in groups
        ],
        outliers=[
            metrics_pb2.GpuOutlier(
                node_id=o.figure.node_id,
                gpu_index=o.figure.gpu_index,
                gpu_model=GPU_MODEL_TO_PROTO[GpuModel(o.figure.gpu_model)],
                busy=o.figure.busy,
                value=o.figure.value,
                median=o.group.median,
                spread=o.group.spread,
                deviations=o.deviations,
            )
            for o in outliers
        ],
    )

"""Metrics as the client returns them: plain dataclasses over numpy arrays, no protobuf.

Times are milliseconds since the Unix epoch (UTC) in ``int64`` arrays; ``Series.times()``
gives datetimes for display. The methods are ``AsyncClient.write_samples``,
``query_metrics`` and ``query_metrics_range`` (and the same on ``Client``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from clients.convert import enum_name
from clients.errors import InvalidValueError
from clients.instants import from_ms
from gpucloud.v1 import metrics_pb2

if TYPE_CHECKING:
    # numpy is imported where arrays are built, not here: every `gpucloud` command imports
    # this module, and most never touch a metric.
    import numpy as np
    import numpy.typing as npt

    Int64Array = npt.NDArray[np.int64]
    Float64Array = npt.NDArray[np.float64]

AGGREGATIONS = ("avg", "min", "max", "sum", "count", "last", "rate")


@dataclass(frozen=True)
class NodeSamples:
    """One node's push: field values per GPU index at one instant."""

    node_id: str
    timestamp_ms: int
    gpus: Mapping[int, Mapping[str, float]]


@dataclass(frozen=True)
class SeriesSamples:
    """Columnar samples of one series; labels need "node" and "field" ("gpu" optional)."""

    labels: Mapping[str, str]
    timestamps_ms: Sequence[int] | Int64Array
    values: Sequence[float] | Float64Array


@dataclass(frozen=True)
class WriteResult:
    """What a write added: the samples new to the store (a resent batch's repeats are not counted) and how many
    series the batch held."""

    samples_written: int
    series_written: int


@dataclass(frozen=True)
class Series:
    """One series of a result. For a stepped query, timestamps are step starts and values
    the step aggregates (NaN for a step without samples)."""

    labels: dict[str, str]
    timestamps_ms: Int64Array
    values: Float64Array

    @property
    def node_id(self) -> str:
        """The ``node`` label: the id of the node measured."""
        return self.labels.get("node", "")

    @property
    def gpu(self) -> str:
        """The ``gpu`` label, the GPU index as a decimal string; "" for a series of the whole node."""
        return self.labels.get("gpu", "")

    @property
    def field(self) -> str:
        """The ``field`` label: what is measured, e.g. ``power_w``."""
        return self.labels.get("field", "")

    def times(self) -> list[datetime]:
        """The timestamps as UTC datetimes."""
        return [from_ms(int(t)) for t in self.timestamps_ms]


@dataclass(frozen=True)
class QueryStats:
    """What the query cost on the server: segment files of the store opened and skipped."""

    segments_total: int
    segments_opened: int
    segments_skipped: int
    bytes_read: int
    samples_decoded: int
    head_samples: int
    series_returned: int
    points_returned: int


@dataclass(frozen=True)
class MetricsResult:
    """The series a query matched and what reading them cost on the server."""

    series: list[Series]
    stats: QueryStats


@dataclass(frozen=True)
class PeerGroup:
    """GPUs compared with one another (one model, busy or not) and the median and spread of their averages."""

    gpu_model: str
    busy: bool
    gpus: int
    median: float
    spread: float


@dataclass(frozen=True)
class GpuOutlier:
    """A GPU whose average over the window sat ``deviations`` spreads below its peers' median."""

    node_id: str
    gpu_index: int
    gpu_model: str
    busy: bool
    value: float
    median: float
    spread: float
    deviations: float


@dataclass(frozen=True)
class Outliers:
    """``list_metric_outliers``' answer: the field and k it judged by, the groups, the outliers (most deviant first)."""

    field: str
    k: float
    groups: list[PeerGroup]
    outliers: list[GpuOutlier]


def outliers(response: metrics_pb2.ListOutliersResponse) -> Outliers:
    """The client's ``Outliers`` of a ListOutliersResponse."""
    return Outliers(
        field=response.field,
        k=response.k,
        groups=[
            PeerGroup(enum_name("GpuModel", "GPU_MODEL_", g.gpu_model), g.busy, g.gpus, g.median, g.spread)
            for g in response.groups
        ],
        outliers=[
            GpuOutlier(
                o.node_id,
                o.gpu_index,
                enum_name("GpuModel", "GPU_MODEL_", o.gpu_model),
                o.busy,
                o.value,
                o.median,
                o.spread,
                o.deviations,
            )
            for o in response.outliers
        ],
    )


def aggregation_value(name: str) -> metrics_pb2.Aggregation.ValueType:
    """The proto enum number of an aggregation name (avg, min, max, sum, count, last, rate)."""
    if name.lower() not in AGGREGATIONS:
        raise InvalidValueError("aggregation", f"unknown aggregation {name!r}; one of {', '.join(AGGREGATIONS)}")
    return metrics_pb2.Aggregation.Value(f"AGGREGATION_{name.upper()}")


def selector(node_ids: Sequence[str], gpu_indexes: Sequence[int], fields: Sequence[str]) -> metrics_pb2.SeriesSelector:
    """The series to read; an empty sequence matches everything the caller may read."""
    return metrics_pb2.SeriesSelector(node_ids=list(node_ids), gpu_indexes=list(gpu_indexes), fields=list(fields))


def write_request(nodes: Sequence[NodeSamples], series: Sequence[SeriesSamples]) -> metrics_pb2.WriteSamplesRequest:
    """One WriteSamplesRequest of node pushes (their GPUs in index order) and columnar series."""
    import numpy as np

    return metrics_pb2.WriteSamplesRequest(
        nodes=[
            metrics_pb2.NodeSamples(
                node_id=n.node_id,
                timestamp_ms=n.timestamp_ms,
                gpus=[metrics_pb2.GpuSample(gpu_index=i, fields=dict(f)) for i, f in sorted(n.gpus.items())],
            )
            for n in nodes
        ],
        series=[
            metrics_pb2.SeriesSamples(
                labels=dict(s.labels),
                timestamps_ms=np.asarray(s.timestamps_ms, dtype=np.int64).tolist(),
                values=np.asarray(s.values, dtype=np.float64).tolist(),
            )
            for s in series
        ],
    )


def result(series: Sequence[metrics_pb2.Series], stats: metrics_pb2.QueryStats) -> MetricsResult:
    """A query response's series, as numpy arrays, and its stats."""
    import numpy as np

    return MetricsResult(
        series=[
            Series(
                labels=dict(s.labels),
                timestamps_ms=np.array(s.timestamps_ms, dtype=np.int64),
                values=np.array(s.values, dtype=np.float64),
            )
            for s in series
        ],
        stats=QueryStats(
            segments_total=stats.segments_total,
            segments_opened=stats.segments_opened,
            segments_skipped=stats.segments_skipped,
            bytes_read=stats.bytes_read,
            samples_decoded=stats.samples_decoded,
            head_samples=stats.head_samples,
            series_returned=stats.series_returned,
            points_returned=stats.points_returned,
        ),
    )

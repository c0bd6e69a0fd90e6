"""Rules of a metrics write: check a batch and turn it into one ascending run per series.

A write arrives in two shapes: a node's push (one timestamp, field values per GPU: what an
agent sends every interval) and columnar series with explicit labels (bulk import). Both become
a ``SeriesBatch``: per series its labels and strictly increasing timestamps, plus the request
field where the series first appears, so a store error about a series can name that field.
Nothing here does I/O or knows gRPC.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

# MAX_FUTURE_MS is named here too: this module is where a write's rules are looked up.
from services.metrics.sample_times import MAX_FUTURE_MS as MAX_FUTURE_MS
from services.metrics.sample_times import SampleTimes
from services.nodes.inventory import GPUS_PER_NODE
from services.validation import ID_PATTERN, Violations
from tsdb import FIELD, GPU, NODE

# Samples are only for GPUs a node has, and registration gives every node exactly these.
MAX_GPU_INDEX = GPUS_PER_NODE - 1
MAX_LABELS = 8
MAX_LABEL_VALUE = 128
FIELD_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
LABEL_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")

Int64Array = npt.NDArray[np.int64]
Float64Array = npt.NDArray[np.float64]
SeriesKey = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class GpuFields:
    """One GPU's field values in a node push."""

    gpu_index: int
    fields: Mapping[str, float]


@dataclass(frozen=True)
class NodePush:
    """Every GPU of one node at one instant."""

    node_id: str
    timestamp_ms: int
    gpus: Sequence[GpuFields]


@dataclass(frozen=True)
class LabeledSeries:
    """Columnar samples of one series with explicit labels."""

    labels: Mapping[str, str]
    timestamps_ms: Int64Array
    values: Float64Array


@dataclass(frozen=True)
class SeriesRun:
    """The samples of one series in a batch, strictly increasing in time."""

    labels: dict[str, str]
    timestamps_ms: Int64Array
    values: Float64Array
    # Where each chunk of the run came from: (offset in the run, request field, whether the
    # field is an array to index), so an error about one sample can name its exact field.
    sources: tuple[tuple[int, str, bool], ...]

    def field_at(self, position: int) -> str:
        """The request field of the run's sample at ``position``."""
        offset, path, indexed = max((src for src in self.sources if src[0] <= position), default=self.sources[0])
        return f"{path}[{position - offset}]" if indexed else path

    def field_of_time(self, timestamp_ms: int) -> str:
        """The request field of the run's sample at ``timestamp_ms`` (its first field if none is)."""
        position = int(np.searchsorted(self.timestamps_ms, timestamp_ms))
        found = position < len(self.timestamps_ms) and int(self.timestamps_ms[position]) == timestamp_ms
        return self.field_at(position if found else 0)


@dataclass(frozen=True)
class SeriesBatch:
    """A checked write: one run per distinct series."""

    runs: tuple[SeriesRun, ...]
    # Each node's first mention in the request (``nodes[0].node_id``), for errors about the node.
    node_paths: Mapping[str, str]

    @property
    def sample_count(self) -> int:
        """Samples in the batch, over every run."""
        return sum(len(run.timestamps_ms) for run in self.runs)

    @property
    def node_ids(self) -> frozenset[str]:
        """The nodes the batch writes for."""
        return frozenset(run.labels[NODE] for run in self.runs)


@dataclass
class _Chunks:
    """One series' samples while a batch is read: array chunks (columnar entries) and single
    samples (pushes), the latter kept as Python numbers until the end because making a numpy
    array per sample would cost more than the rest of the write."""

    labels: dict[str, str]
    sources: list[tuple[int, str, bool]] = field(default_factory=list)
    size: int = 0
    timestamps: list[Int64Array] = field(default_factory=list)
    values: list[Float64Array] = field(default_factory=list)
    pending_ms: list[int] = field(default_factory=list)
    pending_values: list[float] = field(default_factory=list)
    last_ms: int | None = None

    def _seal_pending(self) -> None:
        if self.pending_ms:
            self.timestamps.append(np.array(self.pending_ms, dtype=np.int64))
            self.values.append(np.array(self.pending_values, dtype=np.float64))
            self.pending_ms, self.pending_values = [], []

    def add_array(self, path: str, ts: Int64Array, vals: Float64Array) -> None:
        self._seal_pending()
        self.sources.append((self.size, path, True))
        self.size += len(ts)
        self.timestamps.append(ts)
        self.values.append(vals)
        self.last_ms = int(ts[-1])

    def add_one(self, path: str, at_ms: int, value: float) -> None:
        self.sources.append((self.size, path, False))
        self.size += 1
        self.pending_ms.append(at_ms)
        self.pending_values.append(value)
        self.last_ms = at_ms

    def run(self) -> SeriesRun:
        self._seal_pending()
        return SeriesRun(
            labels=self.labels,
            timestamps_ms=np.concatenate(self.timestamps).astype(np.int64, copy=False),
            values=np.concatenate(self.values).astype(np.float64, copy=False),
            sources=tuple(self.sources),
        )


def series_key(labels: Mapping[str, str]) -> SeriesKey:
    """The identity of a series: its labels, in name order."""
    return tuple(sorted(labels.items()))


def build_batch(nodes: Sequence[NodePush], series: Sequence[LabeledSeries], times: SampleTimes) -> SeriesBatch:
    """Check a write and group it by series; raise INVALID_ARGUMENT naming every bad field.

    Within the batch each series must be strictly increasing in time, in request order (node
    pushes first, then columnar series), so the store never has to reorder or drop anything.
    Every time must be one ``times`` accepts: none the store's next maintenance pass would
    delete, none more than ``MAX_FUTURE_MS`` ahead of the server's clock
    (services/metrics/sample_times.py).
    """
    v = Violations()
    if not nodes and not series:
        v.add("nodes", "a write needs at least one node push or series")
    chunks: dict[SeriesKey, _Chunks] = {}
    node_paths: dict[str, str] = {}
    for i, push in enumerate(nodes):
        node_paths.setdefault(push.node_id, f"nodes[{i}].node_id")
        _node_push(v, chunks, f"nodes[{i}]", push, times)
    for k, run in enumerate(series):
        node_paths.setdefault(run.labels.get(NODE, ""), f"series[{k}].labels[{NODE!r}]")
        _labeled_series(v, chunks, f"series[{k}]", run, times)
    v.raise_if_any()
    runs = tuple(c.run() for c in chunks.values())
    return SeriesBatch(runs, {run.labels[NODE]: node_paths[run.labels[NODE]] for run in runs})


def _timestamp(v: Violations, path: str, value: int, times: SampleTimes) -> bool:
    problem = times.problem(value)
    if problem is not None:
        v.add(path, problem)
    return problem is None


def _series_for(
    v: Violations, chunks: dict[SeriesKey, _Chunks], key: SeriesKey, path: str, first_ms: int
) -> _Chunks | None:
    """The series of ``key``, unless a chunk starting at ``first_ms`` would go back in its time."""
    entry = chunks.get(key)
    if entry is None:
        entry = chunks[key] = _Chunks(dict(key))
    if entry.last_ms is not None and first_ms <= entry.last_ms:
        v.add(
            path,
            f"timestamp {first_ms} is not after {entry.last_ms}, written earlier in this request for the same series",
        )
        return None
    return entry


def _node_push(v: Violations, chunks: dict[SeriesKey, _Chunks], path: str, push: NodePush, times: SampleTimes) -> None:
    before = v.count
    v.identifier(f"{path}.node_id", push.node_id)
    _timestamp(v, f"{path}.timestamp_ms", push.timestamp_ms, times)
    if not push.gpus:
        v.add(f"{path}.gpus", "is required: at least one GPU's fields")
    seen: set[int] = set()
    for j, gpu in enumerate(push.gpus):
        gpu_path = f"{path}.gpus[{j}]"
        if not 0 <= gpu.gpu_index <= MAX_GPU_INDEX:
            v.add(f"{gpu_path}.gpu_index", f"must be 0-{MAX_GPU_INDEX} (got {gpu.gpu_index})")
        elif gpu.gpu_index in seen:
            v.add(f"{gpu_path}.gpu_index", f"GPU {gpu.gpu_index} appears twice in this push")
        seen.add(gpu.gpu_index)
        if not gpu.fields:
            v.add(f"{gpu_path}.fields", "is required: at least one field value")
        for name, value in gpu.fields.items():
            check_field_name(v, f"{gpu_path}.fields[{name!r}]", name)
            if not math.isfinite(value):
                v.add(f"{gpu_path}.fields[{name!r}]", f"must be a finite number (got {value})")
    if v.count > before:
        return
    # What can be wrong with a checked push's sample against the store is its time.
    time_path, at_ms = f"{path}.timestamp_ms", push.timestamp_ms
    node_label = (NODE, push.node_id)
    for gpu in push.gpus:
        gpu_label = (GPU, str(gpu.gpu_index))
        for name, value in gpu.fields.items():
            # Labels in name order (field < gpu < node): the series key without sorting.
            entry = _series_for(v, chunks, ((FIELD, name), gpu_label, node_label), time_path, at_ms)
            if entry is not None:
                entry.add_one(time_path, at_ms, float(value))


def check_field_name(v: Violations, path: str, name: str) -> bool:
    """Whether ``name`` is a metric field name; if not, a violation at ``path`` says what one is."""
    if not FIELD_NAME.fullmatch(name):
        v.add(path, f"field name {name[:80]!r} must be 1-64 of a-z, 0-9 and '_', starting with a letter")
        return False
    return True


def _labels(v: Violations, path: str, labels: Mapping[str, str]) -> bool:
    before = v.count
    if len(labels) > MAX_LABELS:
        v.add(path, f"has {len(labels)} labels; the limit is {MAX_LABELS}")
    if NODE not in labels:
        v.add(f"{path}[{NODE!r}]", "is required")
    if FIELD not in labels:
        v.add(f"{path}[{FIELD!r}]", "is required")
    for name, value in labels.items():
        label_path = f"{path}[{name[:40]!r}]"
        if not LABEL_NAME.fullmatch(name):
            v.add(label_path, "label names are 1-32 of a-z, 0-9 and '_', starting with a letter")
        elif name == NODE:
            if not ID_PATTERN.fullmatch(value):
                v.add(label_path, f"{value[:80]!r} is not a node id")
        elif name == FIELD:
            check_field_name(v, label_path, value)
        elif name == GPU:
            if not _is_gpu_index(value):
                v.add(label_path, f"must be a GPU index 0-{MAX_GPU_INDEX} in decimal (got {value[:80]!r})")
        elif not value or len(value) > MAX_LABEL_VALUE or not value.isprintable():
            v.add(label_path, f"must be 1-{MAX_LABEL_VALUE} printable characters")
    return v.count == before


def _is_gpu_index(value: str) -> bool:
    """A GPU index in plain decimal: no sign, no leading zero, 0-MAX_GPU_INDEX."""
    # Length first: int() refuses strings of more than 4,300 digits with a ValueError.
    if not (0 < len(value) <= len(str(MAX_GPU_INDEX)) and value.isascii() and value.isdigit()):
        return False
    return str(int(value)) == value and int(value) <= MAX_GPU_INDEX


def _labeled_series(
    v: Violations, chunks: dict[SeriesKey, _Chunks], path: str, run: LabeledSeries, times: SampleTimes
) -> None:
    labels_ok = _labels(v, f"{path}.labels", run.labels)
    ts, vals = run.timestamps_ms, run.values
    if len(ts) == 0:
        v.add(f"{path}.timestamps_ms", "is required: at least one sample")
        return
    if len(vals) != len(ts):
        v.add(f"{path}.values", f"has {len(vals)} values for {len(ts)} timestamps; they must pair up")
        return
    ok = labels_ok
    if int(ts.min()) < times.oldest_ms or int(ts.max()) > times.newest_ms:
        bad = int(np.flatnonzero((ts < times.oldest_ms) | (ts > times.newest_ms))[0])
        ok = _timestamp(v, f"{path}.timestamps_ms[{bad}]", int(ts[bad]), times) and ok
    steps = np.flatnonzero(np.diff(ts) <= 0)
    if len(steps):
        bad = int(steps[0]) + 1
        v.add(
            f"{path}.timestamps_ms[{bad}]",
            f"{int(ts[bad])} is not after {int(ts[bad - 1])}: timestamps must be strictly increasing",
        )
        ok = False
    not_finite = np.flatnonzero(~np.isfinite(vals))
    if len(not_finite):
        bad = int(not_finite[0])
        v.add(f"{path}.values[{bad}]", f"must be a finite number (got {float(vals[bad])})")
        ok = False
    if ok:
        time_path = f"{path}.timestamps_ms"
        entry = _series_for(v, chunks, series_key(run.labels), f"{time_path}[0]", int(ts[0]))
        if entry is not None:
            entry.add_array(time_path, ts, vals)

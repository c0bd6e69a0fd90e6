"""Rules of a metrics read: which series (selector), which window, which step and aggregation.

Plain values in, INVALID_ARGUMENT naming every bad field out; no I/O, no gRPC.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum

from services.metrics.batch import MAX_GPU_INDEX, check_field_name
from services.validation import Violations
from tsdb import FIELD, GPU, NODE

MAX_SELECTOR_ITEMS = 1000
# Prometheus' figure: more steps than a screen has pixels is a mistake, not a chart.
MAX_STEPS = 11_000
# Year 9999: far enough for any window, small enough that no arithmetic on it overflows int64.
MAX_TIME_MS = 253_402_300_799_999


class Aggregation(StrEnum):
    """How the samples of one step combine; the values are the tsdb's names."""

    AVG = "avg"
    MIN = "min"
    MAX = "max"
    SUM = "sum"
    COUNT = "count"
    LAST = "last"
    RATE = "rate"


@dataclass(frozen=True)
class Selector:
    """Which series to read; an empty tuple matches everything the caller may read."""

    node_ids: tuple[str, ...] = ()
    gpu_indexes: tuple[int, ...] = ()
    fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class Window:
    """A half-open time window [start_ms, end_ms)."""

    start_ms: int
    end_ms: int


def check_selector(v: Violations, selector: Selector, path: str = "selector") -> None:
    """Every node id, GPU index and field name well formed, and not too many of them."""
    for name, items in (("node_ids", selector.node_ids), ("gpu_indexes", selector.gpu_indexes)):
        if len(items) > MAX_SELECTOR_ITEMS:
            v.add(f"{path}.{name}", f"has {len(items)} items; the limit is {MAX_SELECTOR_ITEMS}")
    if len(selector.fields) > MAX_SELECTOR_ITEMS:
        v.add(f"{path}.fields", f"has {len(selector.fields)} items; the limit is {MAX_SELECTOR_ITEMS}")
    for i, node_id in enumerate(selector.node_ids[:MAX_SELECTOR_ITEMS]):
        v.identifier(f"{path}.node_ids[{i}]", node_id)
    for i, index in enumerate(selector.gpu_indexes[:MAX_SELECTOR_ITEMS]):
        if not 0 <= index <= MAX_GPU_INDEX:
            v.add(f"{path}.gpu_indexes[{i}]", f"must be 0-{MAX_GPU_INDEX} (got {index})")
    for i, name in enumerate(selector.fields[:MAX_SELECTOR_ITEMS]):
        check_field_name(v, f"{path}.fields[{i}]", name)


def check_window(v: Violations, window: Window) -> None:
    """Both ends within [0, year 9999], and the end after the start."""
    ok = True
    for name, value in (("start_ms", window.start_ms), ("end_ms", window.end_ms)):
        if not 0 <= value <= MAX_TIME_MS:
            v.add(name, f"must be milliseconds since the epoch, 0-{MAX_TIME_MS} (got {value})")
            ok = False
    if ok and window.end_ms <= window.start_ms:
        v.add("end_ms", f"must be after start_ms ({window.end_ms} <= {window.start_ms})")


def check_step(v: Violations, window: Window, step_ms: int) -> None:
    """A positive step that cuts the window into at most MAX_STEPS steps."""
    if step_ms <= 0:
        v.add("step_ms", f"must be positive (got {step_ms})")
        return
    span = window.end_ms - window.start_ms
    if span > 0 and -(-span // step_ms) > MAX_STEPS:
        v.add("step_ms", f"cuts the window into {-(-span // step_ms)} steps; the limit is {MAX_STEPS}")


def tsdb_selector(
    selector: Selector, node_ids: Collection[str] | None, gpu_indexes: Collection[int] = ()
) -> Mapping[str, str | frozenset[str]] | None:
    """The tsdb's label matcher for ``selector``, with the nodes narrowed to ``node_ids``
    (None: the selector's own nodes, which may be every node) and the GPUs to ``gpu_indexes``
    (empty: not narrowed). None when the GPUs narrowed leave none of the selector's. An empty
    ``node_ids`` would match every node, so it is refused: a caller with nothing to read must
    not ask."""
    if node_ids is not None and not node_ids:
        raise ValueError("node_ids is empty: nothing to read, and an empty matcher would match every node")
    matcher: dict[str, str | frozenset[str]] = {}
    nodes = selector.node_ids if node_ids is None else tuple(node_ids)
    gpus = selector.gpu_indexes
    if gpu_indexes:
        gpus = tuple(i for i in gpu_indexes if not selector.gpu_indexes or i in selector.gpu_indexes)
        if not gpus:
            return None
    for label, values in (
        (NODE, nodes),
        (GPU, tuple(str(i) for i in gpus)),
        (FIELD, selector.fields),
    ):
        if values:
            matcher[label] = frozenset(values)
    return matcher

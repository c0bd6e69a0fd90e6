"""The control plane's one ``tsdb.Store``, behind an async face.

tsdb is a blocking library, safe from one thread at a time. Every call therefore runs on a
single dedicated thread: calls are serialized without a lock, the event loop never blocks, and
a call whose RPC was cancelled still finishes before the next one starts (an ``asyncio.Lock``
held around ``to_thread`` would be released on cancellation while the thread still ran).
Stepped tenant reads need several store reads in a row; ``read`` runs a whole function of
them as one job. tsdb errors become API errors here, so the rest of the service sees only
``services.errors``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar

import numpy as np
import structlog

import tsdb
from services.errors import InvalidArgument, ResourceExhausted, Unavailable
from services.metrics.batch import Float64Array, Int64Array, SeriesBatch, SeriesKey, SeriesRun, series_key
from services.metrics.selection import Aggregation, Window
from services.metrics.series_limits import SeriesLimits, check_room

log = structlog.get_logger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

Matcher = Mapping[str, str | frozenset[str]]

# What one store read may take, checked while (raw) or before (stepped) it reads, so that a
# query far over a response's limit (services/metrics/commands.py, 200,000 points) is refused
# without first building it: memory and the store's one thread stay bounded. Four times the
# response's limit leaves room for matched series with no samples in the window. A tenant's
# reads cover only its holds, so samples of other tenants' time count against nothing.
MAX_SAMPLES_READ = 800_000
MAX_STEP_VALUES = 800_000


@dataclass(frozen=True)
class SeriesData:
    """One series of a result: labels and parallel arrays."""

    labels: dict[str, str]
    timestamps_ms: Int64Array
    values: Float64Array

    @property
    def key(self) -> SeriesKey:
        """The series' identity: its labels in name order."""
        return series_key(self.labels)


class SampleReader:
    """Synchronous reads against the store, for functions that ``SampleStore.read`` runs on its
    thread. The read limits are the whole job's: a tenant's query is several store reads (one
    per group of holds, per run and part of a step), and together they may take no more than
    one read may."""

    def __init__(self, store: tsdb.Store) -> None:
        self._store = store
        self.stats = tsdb.QueryStats()
        self._samples_left = MAX_SAMPLES_READ
        self._values_left = MAX_STEP_VALUES

    def query(self, matcher: Matcher, window: Window) -> list[SeriesData]:
        """Raw samples of the matching series in the window."""
        result = self._store.query(matcher, window.start_ms, window.end_ms, max_samples=self._samples_left)
        self.stats.add(result.stats)
        self._samples_left -= sum(s.values.size for s in result.series)
        return [_series(s) for s in result.series]

    def query_range(self, matcher: Matcher, window: Window, step_ms: int, aggregation: Aggregation) -> list[SeriesData]:
        """One aggregate per step (starting at the window's start) of the matching series."""
        result = self._store.query_range(
            matcher, window.start_ms, window.end_ms, step_ms, aggregation.value, max_cells=self._values_left
        )
        self.stats.add(result.stats)
        self._values_left -= sum(s.values.size for s in result.series)
        return [_series(s) for s in result.series]


def _series(series: tsdb.Series) -> SeriesData:
    return SeriesData(
        labels=dict(series.labels),
        timestamps_ms=np.asarray(series.timestamps, dtype=np.int64),
        values=np.asarray(series.values, dtype=np.float64),
    )


@dataclass(frozen=True)
class MaintenanceReport:
    """One pass of the maintenance worker."""

    deleted_files: int
    bytes_freed: int
    compacted: bool


class SampleStore:
    """Owns one ``tsdb.Store`` in the control plane's data directory."""

    def __init__(self, store: tsdb.Store, executor: ThreadPoolExecutor, series_limits: SeriesLimits) -> None:
        self._store = store
        self._executor = executor
        self._closed = False
        self._series_limits = series_limits
        # How old a sample may get before the maintenance pass deletes it (None: kept for good).
        self.retention_ms = store.options.retention_ms

    @classmethod
    async def open(
        cls, path: Path, *, retention_ms: int | None, series_limits: SeriesLimits | None = None
    ) -> SampleStore:
        """Open (and recover) the store at ``path``, creating it if new. ``retention_ms``: how old a
        sample may get before the maintenance pass deletes it (None: kept for good); ``series_limits``:
        None for the defaults."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tsdb")
        loop = asyncio.get_running_loop()
        try:
            opener = functools.partial(tsdb.Store.open, path, retention_ms=retention_ms)
            store = await loop.run_in_executor(executor, opener)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        recovery = store.recovery
        log.info(
            "metrics_store_opened",
            path=str(path),
            samples_replayed=recovery.samples_replayed,
            bytes_discarded=recovery.bytes_discarded,
            series_ids_reserved=recovery.series_ids_reserved,
            seconds=round(recovery.seconds, 3),
        )
        return cls(store, executor, series_limits or SeriesLimits())

    async def _run(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._closed:
            raise _unavailable()
        loop = asyncio.get_running_loop()
        # Carry the request's log context (request id, tenant) onto the store thread.
        context = contextvars.copy_context()
        call = functools.partial(context.run, function, *args, **kwargs)
        try:
            return await loop.run_in_executor(self._executor, call)
        except tsdb.StoreClosedError:
            raise _unavailable() from None

    async def write(self, batch: SeriesBatch) -> int:
        """Append the batch whole; return how many samples were new. Returns once the batch is
        in the write-ahead log (it survives a crash).

        A sample repeating a stored time with an identical value is a retry and is not added again,
        so resending a batch after a lost reply is safe, also once it was sealed into a segment. A
        sample older than the store allows for its series is INVALID_ARGUMENT naming its request
        field (reason SAMPLES_OUT_OF_ORDER); series past a node's or the store's limit are
        RESOURCE_EXHAUSTED (SERIES_LIMIT_EXCEEDED). A refused batch changes nothing: none of its
        samples is written and none of its series is registered. A log file deleted under the
        running server (its directory removed) fails this write and every later one
        (tsdb.WalError, answered UNAVAILABLE STORAGE_ERROR) instead of acknowledging samples no
        restart would find.
        """
        return await self._run(self._write, batch)

    def _write(self, batch: SeriesBatch) -> int:
        runs = batch.runs

        def admit(new: list[int]) -> None:
            check_room(self._store, self._series_limits, batch, [runs[i] for i in new])

        try:
            # The store registers the batch's new series only if it takes the whole batch, and
            # only within the series limits (admit).
            added = self._store.append_labelled(
                [run.labels for run in runs],
                np.repeat(np.arange(len(runs)), [len(run.timestamps_ms) for run in runs]),
                np.concatenate([run.timestamps_ms for run in runs]),
                np.concatenate([run.values for run in runs]),
                admit=admit,
            )
            # Not acknowledged if it went into a log file that was deleted (STORAGE_ERROR).
            self._store.ensure_wal_present()
            return added
        except tsdb.OutOfOrderError as error:
            by_key = {series_key(run.labels): run for run in runs}
            raise _out_of_order(by_key.get(series_key(error.labels), runs[0]), error) from None

    async def read(self, function: Callable[[SampleReader], T]) -> tuple[T, tsdb.QueryStats]:
        """Run ``function`` with a reader on the store's thread; return its result and the reads' cost.

        RESOURCE_EXHAUSTED (QUERY_TOO_LARGE) when a read passes ``MAX_SAMPLES_READ`` or ``MAX_STEP_VALUES``.
        """

        def job() -> tuple[T, tsdb.QueryStats]:
            reader = SampleReader(self._store)
            return function(reader), reader.stats

        try:
            return await self._run(job)
        except tsdb.QueryTooLargeError as error:
            raise ResourceExhausted(
                reason="QUERY_TOO_LARGE",
                message=f"{error}: narrow the window or the selector, or use a longer step",
                metadata={"matched": str(error.matched), "limit": str(error.limit)},
            ) from None

    async def maintain(self, now_ms: int, *, compact: bool) -> MaintenanceReport:
        """Seal the head's complete windows into segments, drop expired segments, maybe compact."""
        return await self._run(self._maintain, now_ms, compact)

    def _maintain(self, now_ms: int, compact: bool) -> MaintenanceReport:
        self._store.flush()
        # The store was opened with the retention and applies it (or, without one, deletes no segment).
        report = self._store.enforce_retention(now_ms)
        if compact:
            self._store.compact()
        return MaintenanceReport(
            deleted_files=len(report.deleted_files), bytes_freed=int(report.bytes_freed), compacted=compact
        )

    async def close(self) -> None:
        """Close the store after every queued call has run; later calls are UNAVAILABLE."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._store.close)
        finally:
            self._executor.shutdown(wait=False)
        log.info("metrics_store_closed")


def _out_of_order(run: SeriesRun, error: tsdb.OutOfOrderError) -> InvalidArgument:
    """SAMPLES_OUT_OF_ORDER for the store's refusal of a sample of ``run``, naming its request field."""
    # Short enough to arrive whole (descriptions are cut at 160 characters); the field path
    # says which series.
    why = (
        f"time {error.timestamp_ms} ms is before {error.newest_ms} ms, where the store's sealed segments end"
        if error.behind_boundary
        else f"time {error.timestamp_ms} ms is not after {error.newest_ms} ms, its series' newest stored sample"
    )
    return InvalidArgument.for_field(
        run.field_of_time(int(error.timestamp_ms)),
        f"{why}; nothing of the batch was written",
        reason="SAMPLES_OUT_OF_ORDER",
    )


def _unavailable() -> Unavailable:
    return Unavailable(reason="METRICS_UNAVAILABLE", message="the metrics store is closed (the server is stopping)")

"""Step aggregation from partial aggregates, so decoded samples and directory entries mix freely.

A partial describes some consecutive samples of one series inside one step: count, first/last
time, and whichever of sum, min, max, first/last value and counter increase the aggregate needs.
Partials come from decoded blocks, from the head, or straight from a segment directory (a chunk
wholly inside one step needs no decoding); `combine` merges all partials of a (series, step) in
time order.

Definitions, per step window [s, min(s + step, end)) and series:
avg, sum, min, max, count and last are over the samples in the window (NaN propagates as in
numpy); rate is the counter increase between consecutive samples inside the window (a drop counts
as a reset to zero, so the increase over that pair is the new value) divided by the seconds from
the first to the last sample in the window; NaN when the window holds fewer than two samples.
Every aggregate is NaN for a step without samples.

Arithmetic on NaN, infinities and values whose sums or differences overflow gives what IEEE says
(NaN, an infinity) without numpy's RuntimeWarning: callers run the query under np.errstate, and
counter_increase (shared with the segment writer) silences its own. A step's position is counted
from the window start in unsigned 64-bit arithmetic (step_index), so a window wider than int64
can hold (from near INT64_MIN to positive times) still puts each sample in its step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np
from numpy.typing import NDArray

from tsdb.errors import InvalidArgumentError, QueryTooLargeError

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]

AGGS: Final = ("avg", "min", "max", "sum", "count", "last", "rate")
_NEEDS: Final = {
    "avg": frozenset({"sum"}),
    "sum": frozenset({"sum"}),
    "min": frozenset({"min"}),
    "max": frozenset({"max"}),
    "count": frozenset(),
    "last": frozenset({"last"}),
    "rate": frozenset({"first", "last", "inc"}),
}
VALUE_FIELDS: Final = ("sum", "min", "max", "first", "last", "inc")
# Aggregates whose partials combine in any order (up to floating-point rounding of sums).
_ORDERLESS: Final = frozenset({"avg", "sum", "count", "min", "max"})


def needs(agg: str) -> frozenset[str]:
    """The value fields a partial must carry for `agg`."""
    try:
        return _NEEDS[agg]
    except KeyError:
        raise InvalidArgumentError(f"agg must be one of {', '.join(AGGS)}, got {agg!r}") from None


def step_index(ts: I64, start: int, step: int) -> I64:
    """Per time in `ts` (each at or after `start`), the number of its step: ``(t - start) // step``
    without int64 overflow. The difference fits in uint64 whatever the two times are, and the
    quotient is below the step count, which the caller has checked fits in int64."""
    offset = ts.view(np.uint64) - np.uint64(start % 2**64)
    offset //= np.uint64(step)
    return offset.view(np.int64)


def counter_increase(values: F64, axis: int) -> F64:
    """Per consecutive pair, the counter increase (a drop is a reset to zero). The one rule for
    counters: queries and the segment writer's pre-aggregates both use it. Infinities and
    overflowing differences give NaN or an infinity, as IEEE arithmetic does, without a warning."""
    with np.errstate(over="ignore", invalid="ignore"):
        delta = np.diff(values, axis=axis)
    later = values[:, 1:] if values.ndim == 2 else values[1:]
    result: F64 = np.where(delta < 0, later, delta)
    return result


@dataclass(slots=True)
class Partials:
    """Partial aggregates accumulated from every source of one query."""

    n_steps: int
    need: frozenset[str]
    key: list[I64] = field(default_factory=list)
    count: list[I64] = field(default_factory=list)
    tfirst: list[I64] = field(default_factory=list)
    tlast: list[I64] = field(default_factory=list)
    fields: dict[str, list[F64]] = field(default_factory=dict)
    # Partials held so far, and the most the query may hold (None: no limit): a stepped read's
    # memory goes with them, so the limit stops it while it reads.
    limit: int | None = None
    held: int = 0

    def add(self, key: I64, count: I64, tfirst: I64, tlast: I64, values: dict[str, F64]) -> None:
        """Append partials (all arrays of equal length); QueryTooLargeError past ``limit``."""
        self.held += key.size
        if self.limit is not None and self.held > self.limit:
            raise QueryTooLargeError(
                f"the query read more than {self.limit} partial aggregates", matched=self.held, limit=self.limit
            )
        self.key.append(key)
        self.count.append(count)
        self.tfirst.append(tfirst)
        self.tlast.append(tlast)
        for name in self.need:
            self.fields.setdefault(name, []).append(values[name])

    def add_block(self, positions: I64, ts: I64, block: F64, start: int, step: int) -> None:
        """Partials of a decoded block: rows share `ts`, already cut to the query window."""
        n = ts.size
        if n == 0:
            return
        index = step_index(ts, start, step)
        starts = np.flatnonzero(np.concatenate(([True], index[1:] != index[:-1])))
        ends = np.append(starts[1:], n)
        rows = positions.size
        key = (positions[:, None] * self.n_steps + index[starts][None, :]).ravel()
        values: dict[str, F64] = {}
        if "sum" in self.need:
            values["sum"] = np.add.reduceat(block, starts, axis=1).ravel()
        if "min" in self.need:
            values["min"] = np.minimum.reduceat(block, starts, axis=1).ravel()
        if "max" in self.need:
            values["max"] = np.maximum.reduceat(block, starts, axis=1).ravel()
        if "first" in self.need:
            values["first"] = block[:, starts].ravel()
        if "last" in self.need:
            values["last"] = block[:, ends - 1].ravel()
        if "inc" in self.need:
            pairs = counter_increase(block, axis=1)
            # Pairs that straddle two steps belong to neither.
            pairs[:, starts[1:] - 1] = 0.0
            padded = np.concatenate((np.zeros((rows, 1)), pairs), axis=1)
            values["inc"] = np.add.reduceat(padded, starts, axis=1).ravel()
        self.add(key, np.tile(ends - starts, rows), np.tile(ts[starts], rows), np.tile(ts[ends - 1], rows), values)

    def add_flat(self, positions: I64, ts: I64, vals: F64, start: int, step: int) -> None:
        """Partials of loose samples sorted by (position, time), already cut to the query window."""
        n = ts.size
        if n == 0:
            return
        key = positions * self.n_steps + step_index(ts, start, step)
        boundary = np.concatenate(([True], key[1:] != key[:-1]))
        starts = np.flatnonzero(boundary)
        ends = np.append(starts[1:], n)
        values: dict[str, F64] = {}
        if "sum" in self.need:
            values["sum"] = np.add.reduceat(vals, starts)
        if "min" in self.need:
            values["min"] = np.minimum.reduceat(vals, starts)
        if "max" in self.need:
            values["max"] = np.maximum.reduceat(vals, starts)
        if "first" in self.need:
            values["first"] = vals[starts]
        if "last" in self.need:
            values["last"] = vals[ends - 1]
        if "inc" in self.need:
            pairs = counter_increase(vals, axis=0)
            pairs[boundary[1:]] = 0.0
            values["inc"] = np.add.reduceat(np.concatenate(([0.0], pairs)), starts)
        self.add(key[starts], ends - starts, ts[starts], ts[ends - 1], values)

    def with_samples(self) -> I64:
        """The positions of the query's series that have any partial, ascending. Keys are
        renumbered to count those series alone, so ``combine(len(result), agg)`` builds rows for
        them only: the series matched but without samples in the window (the catalog keeps every
        series ever named) cost nothing."""
        if not self.key:
            return np.empty(0, dtype=np.int64)
        series = np.unique(np.concatenate([key // self.n_steps for key in self.key]))
        self.key = [
            np.searchsorted(series, key // self.n_steps) * self.n_steps + key % self.n_steps for key in self.key
        ]
        return series

    def combine(self, n_series: int, agg: str) -> tuple[F64, NDArray[np.bool_]]:
        """(n_series, n_steps) aggregates, NaN where empty; and which series have any sample."""
        out = np.full((n_series, self.n_steps), np.nan)
        if not self.key:
            return out, np.zeros(n_series, dtype=bool)
        if agg in _ORDERLESS:
            return self._combine_by_key(out, agg)
        key = np.concatenate(self.key)
        tfirst = np.concatenate(self.tfirst)
        order = np.lexsort((tfirst, key))
        key = key[order]
        count = np.concatenate(self.count)[order]
        fields = {name: np.concatenate(parts)[order] for name, parts in self.fields.items()}
        boundary = np.concatenate(([True], key[1:] != key[:-1]))
        starts = np.flatnonzero(boundary)
        ends = np.append(starts[1:], key.size)
        total = np.add.reduceat(count, starts)
        result: F64
        if agg == "count":
            result = total.astype(np.float64)
        elif agg in ("sum", "avg"):
            sums = np.add.reduceat(fields["sum"], starts)
            result = sums / total if agg == "avg" else sums
        elif agg == "min":
            result = np.minimum.reduceat(fields["min"], starts)
        elif agg == "max":
            result = np.maximum.reduceat(fields["max"], starts)
        elif agg == "last":
            result = fields["last"][ends - 1]
        else:
            result = self._rate(fields, tfirst[order], np.concatenate(self.tlast)[order], boundary, starts, ends)
        out.reshape(-1)[key[starts]] = result
        present = np.zeros(n_series, dtype=bool)
        present[key[starts] // self.n_steps] = True
        return out, present

    def _combine_by_key(self, out: F64, agg: str) -> tuple[F64, NDArray[np.bool_]]:
        """combine() for aggregates that do not depend on time order: partials are accumulated per
        (series, step) in the order they were added (segments oldest first, then the head), with
        no sort."""
        key = np.concatenate(self.key) if len(self.key) > 1 else self.key[0]
        size = out.size
        # With weights bincount sums in float64 (the stubs say int): counts stay exact below 2**53.
        total: F64 = np.bincount(key, weights=np.concatenate(self.count), minlength=size).astype(np.float64, copy=False)
        filled: NDArray[np.bool_] = total > 0
        result: F64
        if agg == "count":
            result = total
        elif agg in ("sum", "avg"):
            sums: F64 = np.bincount(key, weights=np.concatenate(self.fields["sum"]), minlength=size).astype(
                np.float64, copy=False
            )
            result = sums / np.where(filled, total, 1.0) if agg == "avg" else sums
        else:
            name = "min" if agg == "min" else "max"
            result = np.full(size, np.inf if agg == "min" else -np.inf)
            (np.minimum if agg == "min" else np.maximum).at(result, key, np.concatenate(self.fields[name]))
        flat = out.reshape(-1)
        flat[filled] = result[filled]
        present: NDArray[np.bool_] = np.any(filled.reshape(out.shape), axis=1)
        return out, present

    @staticmethod
    def _rate(
        fields: dict[str, F64], tfirst: I64, tlast: I64, boundary: NDArray[np.bool_], starts: I64, ends: I64
    ) -> F64:
        first, last = fields["first"], fields["last"]
        # Between consecutive partials of the same step: the pair (last of one, first of the next).
        cross = np.where(first[1:] < last[:-1], first[1:], first[1:] - last[:-1])
        cross[boundary[1:]] = 0.0
        increase = np.add.reduceat(fields["inc"], starts) + np.add.reduceat(np.concatenate(([0.0], cross)), starts)
        # The two times share a step, which may be wider than int64 can hold: subtract unsigned.
        seconds = (tlast[ends - 1].view(np.uint64) - tfirst[starts].view(np.uint64)) / 1000.0
        with np.errstate(divide="ignore", invalid="ignore"):
            rate: F64 = np.where(seconds > 0, increase / seconds, np.nan)
        return rate

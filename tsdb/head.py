"""The in-memory head: the newest samples of every series, not yet sealed into a segment.

Samples live in two preallocated 2-D numpy buffers indexed [series id, position] (timestamps and
values); each row is sorted by time and padded with INT64_MAX, so "how many samples before t" is a
comparison, not a search. A batch is checked completely before anything changes (check), then
applied (apply). The usual batch (one timestamp for every sample, each series once) takes a
vectorised fast path; anything else goes through a sort by (series, time). An id set that keeps
coming back (a node's push) can skip even that check: a FastBatch remembers, while nothing else
changes its series, how many samples each holds and the newest time (fast_ready / fast_apply).

Order rules for a sample at time t of series s:
- t > newest(s): appended.
- t == the time of a sample of s in the head and the value is bit-identical: a duplicate (an
  agent's retry, or a resent batch), dropped.
- otherwise it is out of order: rejected, unless ooo_window_ms > 0 and newest(s) - ooo_window_ms
  <= t and t >= the sealed boundary; then it is inserted in place (rows stay sorted).
- any t below the sealed boundary is rejected: every sample older than the boundary is in a
  segment (a flush moves it to the end of the windows it cut; a forced flush to just past the
  newest sample it sealed). The Store drops repeats of sealed samples before the head sees
  them (Store._without_sealed_repeats).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from tsdb._int64 import INT64_MAX, INT64_MIN
from tsdb.errors import OutOfOrderError

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]
# Late samples looked up in their rows at a time: bounds the rows copied for the comparison.
_LOOKUP_CHUNK: Final = 1024
_INITIAL_CAPACITY: Final = 256
# At most this many fast batches are tracked at once (see Head.fast_batch).
_MAX_FAST_BATCHES: Final = 4096


@dataclass(slots=True)
class Plan:
    """A checked batch, ready to apply: the accepted samples and how to insert them.

    `timestamps` is one int when every accepted sample shares it (the fast path, which also
    guarantees each series appears once and every sample is in order). `size`: samples it adds.
    """

    sids: I64
    timestamps: int | I64
    values: F64
    min_ts: int
    max_ts: int
    ooo: NDArray[np.bool_] | None
    duplicates: int
    size: int = -1

    def __post_init__(self) -> None:
        self.size = int(self.sids.size)


@dataclass(slots=True, eq=False)
class FastBatch:
    """A set of distinct series ids that keeps coming back together (one node's push), with what the
    head knows about them while it holds them: every one has `pos` samples, none is newer than `last`.

    That knowledge is valid while `version` equals the head's: anything else that changes these
    series (another path, a flush) moves the head's version on, and the next push claims it again.
    """

    sids: I64
    # The same ids as a slice when they are consecutive: writes become strided copies, not gathers.
    run: slice | None
    ident: int
    pos: int = 0
    last: int = INT64_MIN
    version: int = -1


@dataclass(slots=True)
class Taken:
    """Samples a flush seals: per series id, its timestamps and values (all older than `end`;
    None: everything in the head)."""

    sids: list[int]
    timestamps: list[I64]
    values: list[F64]
    end: int | None

    @property
    def samples(self) -> int:
        """Total samples taken."""
        return sum(int(t.size) for t in self.timestamps)


class Head:
    """Per-series sorted sample buffers plus the bookkeeping of what is sealed."""

    def __init__(self, *, ooo_window_ms: int, describe: Callable[[int], tuple[int, Mapping[str, str]]]) -> None:
        """`describe(sid)` names a series in a refusal: the id to report (-1 for one that does not
        exist yet) and its labels."""
        self.ooo_window_ms = ooo_window_ms
        self._describe = describe
        self.ts = np.full((0, _INITIAL_CAPACITY), INT64_MAX, dtype=np.int64)
        self.vals = np.zeros((0, _INITIAL_CAPACITY), dtype=np.float64)
        self.count = np.zeros(0, dtype=np.int64)
        # Newest time per series, in the head or sealed; INT64_MIN when it never had a sample.
        self.newest = np.zeros(0, dtype=np.int64)
        self._mark = np.zeros(0, dtype=np.int64)
        # Fast batches: which one owns each series (-1: none), the batches by ident, and the version
        # that moves on with every change made some other way.
        self._owner = np.zeros(0, dtype=np.int64)
        self._batches: dict[int, FastBatch] = {}
        self._version = 0
        self._next_ident = 0
        # Every sample older than `boundary` is sealed, for every series.
        self.boundary = INT64_MIN
        self.oldest = INT64_MAX
        self.max_ts = INT64_MIN
        self.samples = 0

    # ---- capacity -------------------------------------------------------------------------

    def ensure_rows(self, rows: int) -> None:
        """Make room for series ids below `rows`."""
        have = self.count.size
        if rows <= have:
            return
        grown = max(rows, 2 * have, 16)
        extra = grown - have
        cap = self.ts.shape[1]
        self.ts = np.concatenate([self.ts, np.full((extra, cap), INT64_MAX, dtype=np.int64)])
        self.vals = np.concatenate([self.vals, np.zeros((extra, cap), dtype=np.float64)])
        self.count = np.concatenate([self.count, np.zeros(extra, dtype=np.int64)])
        self.newest = np.concatenate([self.newest, np.full(extra, INT64_MIN, dtype=np.int64)])
        self._mark = np.concatenate([self._mark, np.full(extra, -1, dtype=np.int64)])
        self._owner = np.concatenate([self._owner, np.full(extra, -1, dtype=np.int64)])

    def _ensure_capacity(self, needed: int) -> None:
        cap = self.ts.shape[1]
        if needed <= cap:
            return
        grown = max(needed, 2 * cap)
        rows = self.count.size
        ts = np.full((rows, grown), INT64_MAX, dtype=np.int64)
        vals = np.zeros((rows, grown), dtype=np.float64)
        used = int(self.count.max(initial=0))
        ts[:, :used] = self.ts[:, :used]
        vals[:, :used] = self.vals[:, :used]
        self.ts, self.vals = ts, vals

    # ---- checking -------------------------------------------------------------------------

    def check(self, sids: I64, timestamps: int | I64, values: F64, *, unique: bool | None = None) -> Plan:
        """Validate a batch against the order rules without changing anything.

        `unique` tells that every id in sids is distinct (the caller knows it), saving that check.
        """
        if isinstance(timestamps, int):
            t = timestamps
            if (
                sids.size
                and t >= self.boundary
                and t > int(self.newest[sids].max())
                and (self.unique(sids) if unique is None else unique)
            ):
                return Plan(sids, t, values, t, t, None, 0)
            return self._check_general(sids, np.full(sids.size, t, dtype=np.int64), values)
        return self._check_general(sids, timestamps, values)

    def unique(self, sids: I64) -> bool:
        """Whether every id in sids (all below the head's row count) is distinct."""
        index = np.arange(sids.size, dtype=np.int64)
        self._mark[sids] = index
        return bool((self._mark[sids] == index).all())

    def _reject(self, sid: int, t: int, newest: int, rejected: int, why: str) -> OutOfOrderError:
        series_id, described = self._describe(sid)
        labels = dict(described)
        name = f"series {series_id}" if series_id >= 0 else "new series"
        return OutOfOrderError(
            f"{rejected} sample(s) rejected; first: {name} {labels} at {t} ms: {why}",
            series_id=series_id,
            labels=labels,
            timestamp_ms=t,
            newest_ms=newest,
            rejected=rejected,
            behind_boundary=t < self.boundary,
        )

    def _check_general(self, sids: I64, ts: I64, values: F64) -> Plan:
        if sids.size == 0:
            return Plan(sids, ts, values, 0, 0, None, 0)
        order = np.lexsort((ts, sids))
        s, t, v = sids[order], ts[order], values[order]
        keep = np.ones(s.size, dtype=bool)
        same = np.flatnonzero((s[1:] == s[:-1]) & (t[1:] == t[:-1])) + 1
        if same.size:
            conflict = same[v[same].view(np.uint64) != v[same - 1].view(np.uint64)]
            if conflict.size:
                i = int(conflict[0])
                raise self._reject(int(s[i]), int(t[i]), int(t[i]), conflict.size, "two different values in one batch")
            keep[same] = False
        newest = self.newest[s]
        late = keep & (t <= newest)
        ooo = np.zeros(s.size, dtype=bool)
        duplicates = int(same.size)
        bad = keep & (t < self.boundary)
        if late.any():
            dup, ok_ooo = self._classify_late(s, t, v, newest, late)
            keep &= ~dup
            duplicates += int(dup.sum())
            ooo = ok_ooo
            bad |= late & ~dup & ~ok_ooo
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            sid, ti = int(s[i]), int(t[i])
            if ti < self.boundary:
                why = f"older than the sealed boundary {self.boundary} ms"
                limit = int(self.boundary)
            else:
                why = f"not newer than the series' newest sample at {int(newest[i])} ms"
                if self.ooo_window_ms:
                    why += f" beyond the out-of-order window of {self.ooo_window_ms} ms"
                limit = int(newest[i])
            raise self._reject(sid, ti, limit, int(bad.sum()), why)
        s, t, v, ooo = s[keep], t[keep], v[keep], ooo[keep]
        if s.size == 0:
            return Plan(s, t, v, 0, 0, None, duplicates)
        return Plan(s, t, v, int(t.min()), int(t.max()), ooo if ooo.any() else None, duplicates)

    def _classify_late(
        self, s: I64, t: I64, v: F64, newest: I64, late: NDArray[np.bool_]
    ) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
        """Among samples not newer than their series: repeats of a sample the head holds (same
        time, bit-identical value), and acceptable out-of-order ones.

        Any held sample counts, not only the newest: a resent batch carries several samples of
        a series, and all but its last are older than the series' newest by then. The common
        retry (an agent's push sent again) repeats each series' newest sample and is settled in
        one vectorised comparison; only the rest are looked up in their rows.
        """
        dup = np.zeros(s.size, dtype=bool)
        ooo = np.zeros(s.size, dtype=bool)
        at = np.flatnonzero(late)
        rows, counts = s[at], self.count[s[at]]
        last = np.maximum(counts - 1, 0)
        repeats_newest = (
            (counts > 0)
            & (self.ts[rows, last] == t[at])
            & (self.vals[rows, last].view(np.uint64) == v[at].view(np.uint64))
        )
        dup[at[repeats_newest]] = True
        rest = at[~repeats_newest]
        # Rows are padded with INT64_MAX, so counting the entries below t gives t's position
        # without a search per row; chunks bound the copy of the rows compared.
        for chunk in np.array_split(rest, -(-rest.size // _LOOKUP_CHUNK)) if rest.size else ():
            held = self.ts[s[chunk]]
            position = np.minimum((held < t[chunk, None]).sum(axis=1), held.shape[1] - 1)
            found = held[np.arange(chunk.size), position] == t[chunk]
            same = self.vals[s[chunk], position].view(np.uint64) == v[chunk].view(np.uint64)
            dup[chunk] = found & same
            if self.ooo_window_ms:
                ooo[chunk] = ~found & (t[chunk] >= newest[chunk] - self.ooo_window_ms) & (t[chunk] >= self.boundary)
        return dup, ooo

    # ---- fast batches ---------------------------------------------------------------------

    def fast_batch(self, sids: I64) -> FastBatch:
        """A FastBatch for distinct, valid ids (the caller has checked both)."""
        first = int(sids[0]) if sids.size else 0
        consecutive = sids.size > 0 and int(sids[-1]) - first == sids.size - 1 and bool((np.diff(sids) == 1).all())
        self._next_ident += 1
        ident = self._next_ident
        return FastBatch(sids.copy(), slice(first, first + sids.size) if consecutive else None, ident)

    def fast_ready(self, batch: FastBatch, t: int) -> bool:
        """Whether one sample per series of `batch` at time t can be appended by fast_apply: t is
        newer than every one of them and not behind the sealed boundary (otherwise use check)."""
        if batch.version != self._version and not self._claim(batch):
            return False
        return t > batch.last and t >= self.boundary

    def _claim(self, batch: FastBatch) -> bool:
        """Take ownership of the batch's series if they hold equally many samples; other batches that
        owned some of them lose their knowledge (their next push claims again)."""
        sids = batch.sids
        counts = self.count[sids]
        pos = int(counts[0]) if counts.size else 0
        if not bool((counts == pos).all()):
            return False
        if batch.ident not in self._batches:
            if len(self._batches) >= _MAX_FAST_BATCHES:
                # Too many id sets in play: every other batch forgets what it knew and claims again.
                self._batches.clear()
                self._owner.fill(-1)
                self._version += 1
            self._batches[batch.ident] = batch
        for other in set(self._owner[sids].tolist()) - {-1, batch.ident}:
            if (loser := self._batches.get(other)) is not None:
                loser.version = -1
        self._owner[sids] = batch.ident
        batch.pos = pos
        batch.last = int(self.newest[sids].max(initial=INT64_MIN))
        batch.version = self._version
        return True

    def fast_apply(self, batch: FastBatch, t: int, values: F64) -> None:
        """Append one sample per series at time t (after fast_ready said yes)."""
        pos = batch.pos
        if pos >= self.ts.shape[1]:
            self._ensure_capacity(pos + 1)
        index = batch.run if batch.run is not None else batch.sids
        self.ts[index, pos] = t
        self.vals[index, pos] = values
        self.count[index] = pos + 1
        self.newest[index] = t
        batch.pos = pos + 1
        batch.last = t
        self.samples += batch.sids.size
        if t < self.oldest:
            self.oldest = t
        if t > self.max_ts:
            self.max_ts = t

    # ---- applying -------------------------------------------------------------------------

    def apply(self, plan: Plan) -> None:
        """Insert a checked plan's samples."""
        if plan.size == 0:
            return
        self._version += 1
        if isinstance(plan.timestamps, int):
            self._append_fast(plan.sids, plan.timestamps, plan.values)
        else:
            ts = plan.timestamps
            if plan.ooo is not None:
                for i in np.flatnonzero(plan.ooo).tolist():
                    self._insert_one(int(plan.sids[i]), int(ts[i]), float(plan.values[i]))
                keep = ~plan.ooo
                self._append_sorted(plan.sids[keep], ts[keep], plan.values[keep])
            else:
                self._append_sorted(plan.sids, ts, plan.values)
        self.samples += plan.size
        self.oldest = min(self.oldest, plan.min_ts)
        self.max_ts = max(self.max_ts, plan.max_ts)

    def _append_fast(self, sids: I64, t: int, values: F64) -> None:
        pos = self.count[sids]
        try:
            self.ts[sids, pos] = t
            self.vals[sids, pos] = values
        except IndexError:
            # A row is full: grow, then write again (rewriting the same cells is harmless). Cheaper
            # than checking the largest position on every push.
            self._ensure_capacity(int(pos.max()) + 1)
            self.ts[sids, pos] = t
            self.vals[sids, pos] = values
        pos += 1
        self.count[sids] = pos
        self.newest[sids] = t

    def _append_sorted(self, s: I64, t: I64, v: F64) -> None:
        """Append samples sorted by (series, time), each newer than its series' newest."""
        if s.size == 0:
            return
        starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
        lengths = np.diff(np.append(starts, s.size))
        run = np.repeat(np.arange(starts.size), lengths)
        rank = np.arange(s.size) - starts[run]
        unique = s[starts]
        pos = self.count[s] + rank
        self._ensure_capacity(int(pos.max()) + 1)
        self.ts[s, pos] = t
        self.vals[s, pos] = v
        self.count[unique] += lengths
        self.newest[unique] = t[starts + lengths - 1]

    def _insert_one(self, sid: int, t: int, value: float) -> None:
        n = int(self.count[sid])
        self._ensure_capacity(n + 1)
        row_t, row_v = self.ts[sid], self.vals[sid]
        j = int(np.searchsorted(row_t[:n], t))
        row_t[j + 1 : n + 1] = row_t[j:n].copy()
        row_v[j + 1 : n + 1] = row_v[j:n].copy()
        row_t[j], row_v[j] = t, value
        self.count[sid] = n + 1

    def load(self, sids: I64, ts: I64, values: F64) -> int:
        """Insert replayed WAL samples (accepted once already); returns how many were already sealed."""
        self._version += 1
        self.ensure_rows(int(sids.max(initial=-1)) + 1)
        sealed = ts < self.boundary
        skipped = int(sealed.sum())
        if skipped:
            sids, ts, values = sids[~sealed], ts[~sealed], values[~sealed]
        if sids.size == 0:
            return skipped
        order = np.lexsort((ts, sids))
        s, t, v = sids[order], ts[order], values[order]
        # A batch written twice (retried after an unclear failure) would repeat samples: keep the last.
        repeat = np.flatnonzero((s[1:] == s[:-1]) & (t[1:] == t[:-1]))
        if repeat.size:
            keep = np.ones(s.size, dtype=bool)
            keep[repeat] = False
            s, t, v = s[keep], t[keep], v[keep]
        self._append_sorted(s, t, v)
        self.samples += int(s.size)
        self.oldest = min(self.oldest, int(t.min()))
        self.max_ts = max(self.max_ts, int(t.max()))
        return skipped

    # ---- reading --------------------------------------------------------------------------

    def window(self, sid: int, start: int, end: int) -> tuple[I64, F64]:
        """Copies of series `sid`'s head samples in [start, end)."""
        if self.samples == 0 or self.oldest >= end or self.max_ts < start or sid >= self.count.size:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        n = int(self.count[sid])
        row = self.ts[sid, :n]
        if n == 0 or row[n - 1] < start or row[0] >= end:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        lo, hi = int(row.searchsorted(start)), int(row.searchsorted(end))
        return row[lo:hi].copy(), self.vals[sid, lo:hi].copy()

    def window_many(self, sids: I64, start: int, end: int) -> tuple[I64, I64, F64]:
        """All head samples of `sids` in [start, end), flattened: (index into sids, time, value),
        sorted by index then time."""
        present = np.flatnonzero(sids < self.count.size)
        if present.size == 0 or self.samples == 0 or self.oldest >= end or self.max_ts < start:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, np.empty(0, dtype=np.float64)
        rows_sids = sids[present]
        width = int(self.count[rows_sids].max(initial=0))
        block = self.ts[rows_sids, :width]
        rows, cols = np.nonzero((block >= start) & (block < end))
        return present[rows].astype(np.int64), block[rows, cols], self.vals[rows_sids[rows], cols]

    # ---- sealing --------------------------------------------------------------------------

    def peek(self, end: int | None) -> Taken:
        """Copies of every sample older than `end` (every sample when end is None); the head is
        unchanged until release() is called with the result, so a failed segment write loses nothing."""
        rows = self.count.size
        width = int(self.count.max(initial=0))
        if width == 0:
            return Taken([], [], [], end)
        cut = self.count.copy() if end is None else (self.ts[:rows, :width] < end).sum(axis=1)
        sids = np.flatnonzero(cut)
        if sids.size == 0:
            return Taken([], [], [], end)
        # One gather per buffer; each series' samples are a view of those copies.
        deepest = int(cut.max())
        index = slice(None) if sids.size == rows else sids
        ts_block = self.ts[index, :deepest].copy()
        value_block = self.vals[index, :deepest].copy()
        cuts = cut[sids].tolist()
        return Taken(
            sids.tolist(),
            [ts_block[i, :k] for i, k in enumerate(cuts)],
            [value_block[i, :k] for i, k in enumerate(cuts)],
            end,
        )

    def release(self, taken: Taken) -> None:
        """Drop the samples of a peek() that are now sealed, and move the sealed boundary past them."""
        self._version += 1
        rows = self.count.size
        width = int(self.count.max(initial=0))
        drop = np.zeros(rows, dtype=np.int64)
        drop[taken.sids] = [ts.size for ts in taken.timestamps]
        # Rows that drop equally many samples shift together (usually one group: every series).
        for k in set(drop[drop > 0].tolist()):
            index = slice(None) if k == drop[0] and bool((drop == k).all()) else np.flatnonzero(drop == k)
            # Past a row's count its timestamps are INT64_MAX, so shifting the whole used width keeps that.
            self.ts[index, : width - k] = self.ts[index, k:width]
            self.vals[index, : width - k] = self.vals[index, k:width]
            self.ts[index, width - k : width] = INT64_MAX
        self.count -= drop
        self.samples -= taken.samples
        end = taken.end
        if end is None:
            # Everything is sealed now: later samples must be newer than all of it.
            end = max((int(ts[-1]) for ts in taken.timestamps), default=self.boundary - 1) + 1
        self.boundary = max(self.boundary, end)
        nonempty = self.count > 0
        self.oldest = int(self.ts[nonempty, 0].min()) if nonempty.any() else INT64_MAX

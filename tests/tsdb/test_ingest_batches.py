"""Pushes of recurring id sets (the agent's path, which skips re-checking what it already knows)
against a plain model of the order rules: overlapping and non-consecutive sets, retries, stale
pushes, the general path in between, flushes and a reopen."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tsdb
from tests.tsdb.helpers import T0

BATCHES = ([0, 1, 2, 3], [2, 3, 4, 5], [6, 9, 7], [10, 11], list(range(12)), [11, 10])
ops = st.lists(
    st.tuples(st.sampled_from(("next", "next", "next", "retry", "stale", "flush", "general")), st.integers(0, 5)),
    min_size=1,
    max_size=60,
)


def values_at(t: int, sids: list[int], salt: int = 0) -> np.ndarray:
    return np.array([((t // 1000) * 7 + sid * 13 + salt) % 101 / 4 for sid in sids])


class Model:
    """What the store must hold: per series its samples; newest time per series."""

    def __init__(self) -> None:
        self.samples: dict[int, dict[int, float]] = {sid: {} for sid in range(12)}
        self.newest: dict[int, int] = {}

    def append(self, sids: list[int], t: int, values: np.ndarray, boundary: int) -> int | None:
        """Samples added, or None when the batch must be rejected whole."""
        if t < boundary:
            # Behind the sealed boundary only a repeat of sealed samples is taken (as a retry).
            repeats = all(self.samples[sid].get(t) == value for sid, value in zip(sids, values.tolist(), strict=True))
            return 0 if repeats else None
        added = 0
        for sid, value in zip(sids, values.tolist(), strict=True):
            newest = self.newest.get(sid)
            # A repeat of any held sample (same time, same value) is a retry; anything else not
            # newer than the series' newest is out of order.
            if newest is not None and t <= newest and self.samples[sid].get(t) != value:
                return None
        for sid, value in zip(sids, values.tolist(), strict=True):
            if t not in self.samples[sid]:
                self.samples[sid][t] = value
                self.newest[sid] = t
                added += 1
        return added


@settings(max_examples=60, deadline=None)
@given(ops)
@example([("next", 0)] * 8 + [("stale", 0), ("general", 0), ("stale", 0)])
@example([("next", 0), ("next", 1), ("next", 0), ("retry", 1), ("next", 1), ("retry", 0), ("next", 4), ("retry", 3)])
@example([("next", 2), ("next", 2), ("flush", 0), ("retry", 2), ("next", 2), ("general", 2), ("next", 2)])
@example([("next", 3), ("next", 5), ("next", 3), ("next", 5), ("retry", 5), ("stale", 3)])
def test_recurring_batches_follow_the_order_rules(steps: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s"
        store = tsdb.Store.open(path, segment_ms=60_000)
        try:
            ids = store.series_ids([{"node": "n", "gpu": str(g)} for g in range(12)])
            assert ids.tolist() == list(range(12))
            model = Model()
            clock = T0
            last: dict[int, tuple[int, np.ndarray]] = {}
            for kind, which in steps:
                sids = BATCHES[which]
                if kind == "flush":
                    store.flush(force=True)
                    continue
                if kind == "retry" and which in last:
                    t, values = last[which]
                elif kind == "stale":
                    t, values = clock - 5_000, values_at(clock - 5_000, sids, 1)
                else:
                    clock += 1_000
                    t, values = clock, values_at(clock, sids)
                expected = model.append(sids, t, values, store.head.boundary)
                array = np.array(sids, dtype=np.int64)
                try:
                    if kind == "general":  # per-sample timestamps: the checked path
                        added = store.append(array, np.full(len(sids), t, dtype=np.int64), values)
                    else:
                        added = store.append(array, t, values)
                except tsdb.OutOfOrderError:
                    added = None
                assert added == expected, (kind, sids, t)
                if added is not None:
                    last[which] = (t, values)
            for _ in range(2):  # before and after a reopen (the WAL replayed into the head)
                for sid in range(12):
                    got = store.query({"node": "n", "gpu": str(sid)}, T0 - 10**6, clock + 10**6).series
                    held = list(zip(got[0].timestamps.tolist(), got[0].values.tolist(), strict=True)) if got else []
                    assert held == sorted(model.samples[sid].items())
                store.close()
                store = tsdb.Store.open(path, segment_ms=60_000)
        finally:
            store.close()

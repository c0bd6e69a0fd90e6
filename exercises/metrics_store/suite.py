"""The metrics-store suite: random streams of samples sealed at random points, against a model
that cuts each sealed run of samples into one segment per window; queries whose counts of
segments read and skipped follow from the segments' time ranges alone; retention by whole file;
and the traps by hand (a window of 100 ms, a retention of 300 ms).

Every store lives in a directory of its own, made empty for it and removed afterwards: in
memory (``/dev/shm``) where the machine has it, since a store fsyncs each file it writes and a
few hundred stores on a disk would take a minute.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exercises.harness import Implementation, Mistake, guarded, needs, under_test

impl = under_test()
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
WINDOW = 100
RETENTION = 300
SERIES = ("gpu0/power_w", "gpu1/power_w", "gpu0/temp_c")
APPEND, SEAL, SEGMENTS = "MetricsStore.append", "MetricsStore.seal", "MetricsStore.segments"
QUERY, RETAIN = "MetricsStore.query", "MetricsStore.enforce_retention"


@contextmanager
def opened(impl: Implementation) -> Iterator[Any]:
    """A store of the implementation on an empty directory of its own, closed afterwards."""
    with tempfile.TemporaryDirectory(prefix="metrics-store-", dir=SCRATCH) as directory:
        store = guarded(impl.MetricsStore(Path(directory), segment_ms=WINDOW, retention_ms=RETENTION))
        try:
            yield store
        finally:
            close = getattr(store, "close", None)
            if close is not None:
                close()


@dataclass(frozen=True)
class Step:
    """One sample appended, and whether ``seal`` is called after it."""

    series: str
    t: int
    value: float
    seal_after: bool


@st.composite
def streams(draw: st.DrawFn) -> list[Step]:
    """Samples in time order (one at each instant) over ten windows, sealed here and there."""
    times = sorted(draw(st.sets(st.integers(0, 10 * WINDOW - 1), min_size=1, max_size=24)))
    return [
        Step(draw(st.sampled_from(SERIES)), t, float(draw(st.integers(-1000, 1000))), draw(st.booleans()))
        for t in times
    ]


@dataclass(frozen=True)
class Group:
    """What one segment must hold: a window's samples of one sealed run."""

    min_ms: int
    max_ms: int
    steps: tuple[Step, ...]


def groups(steps: list[Step]) -> list[Group]:
    """The model: the samples between two seals (the last run sealed too), cut by window."""
    out: list[Group] = []
    run: dict[int, list[Step]] = {}
    for i, step in enumerate(steps):
        run.setdefault(step.t // WINDOW, []).append(step)
        if step.seal_after or i == len(steps) - 1:
            out += [Group(ws[0].t, ws[-1].t, tuple(ws)) for _, ws in sorted(run.items())]
            run = {}
    return out


def fill(store: Any, steps: list[Step]) -> None:
    """Append every step, sealing where it says, and seal the rest."""
    for step in steps:
        store.append(step.series, step.t, step.value)
        if step.seal_after:
            store.seal()
    store.seal()


def ranges(segments: list[Any]) -> list[tuple[int, int]]:
    return [(s.min_ms, s.max_ms) for s in segments]


def meets(min_ms: int, max_ms: int, start: int, end: int) -> bool:
    """Whether a segment of samples from ``min_ms`` to ``max_ms`` (inclusive) meets ``[start, end)``."""
    return max_ms >= start and min_ms < end


def contents(segments: list[Any]) -> dict[str, bytes]:
    """Each segment file's bytes, by path."""
    return {s.path: Path(s.path).read_bytes() for s in segments}


def samples_of(series: str, steps: list[Step] | tuple[Step, ...], start: int, end: int) -> list[tuple[int, float]]:
    return sorted((s.t, s.value) for s in steps if s.series == series and start <= s.t < end)


def three_windows(store: Any) -> None:
    """One sample in each of the windows [0, 100), [100, 200) and [200, 300), sealed."""
    for t in (10, 110, 210):
        store.append("a", t, float(t))
    store.seal()


def straddling(store: Any) -> None:
    """A segment [110, 190] and a segment [250, 250], sealed."""
    for t in (110, 190, 250):
        store.append("a", t, float(t))
    store.seal()


def _reads_everything(impl: Implementation) -> bool:
    with opened(impl) as store:
        three_windows(store)
        result = store.query("a", 200, 300)
        return bool((result.segments_read, result.segments_skipped) != (1, 2))


def _one_file_per_seal(impl: Implementation) -> bool:
    with opened(impl) as store:
        store.append("a", 10, 1.0)
        store.append("a", 150, 2.0)
        return len(store.seal()) != 2


def _drops_a_kept_sample(impl: Implementation) -> bool:
    with opened(impl) as store:
        straddling(store)
        return bool(store.enforce_retention(460) != [])


def _rewrites(impl: Implementation) -> bool:
    with opened(impl) as store:
        straddling(store)
        before = store.segments()
        kept = contents(before)
        store.enforce_retention(460)
        after = store.segments()
        return any(s not in before or Path(s.path).read_bytes() != kept[s.path] for s in after)


def _writes_behind_the_seal(impl: Implementation) -> bool:
    with opened(impl) as store:
        store.append("a", 10, 1.0)
        store.append("b", 30, 3.0)
        store.seal()
        try:
            store.append("a", 20, 2.0)
        except impl.OutOfOrder:
            return False
        return True


MISTAKES = [
    Mistake(
        "reads_every_segment",
        "a query opens only the segments whose [min, max] meets the window, found in the in-memory index;"
        " every other one is counted as skipped and its file never touched",
        (QUERY,),
        _reads_everything,
    ),
    Mistake(
        "one_file_per_seal",
        "seal cuts the head at window boundaries (multiples of segment_ms): one file per window, so that"
        " pruning and retention work a window at a time",
        (SEAL,),
        _one_file_per_seal,
    ),
    Mistake(
        "deletes_by_oldest_sample",
        "a segment goes only once its newest sample is older than now - retention: one that straddles the"
        " cutoff still holds samples inside the kept window",
        (RETAIN,),
        _drops_a_kept_sample,
    ),
    Mistake(
        "rewrites_segments",
        "retention deletes whole files and never rewrites one: a segment straddling the cutoff stays as it is,"
        " its older samples visible until the whole file expires",
        (RETAIN,),
        _rewrites,
    ),
    Mistake(
        "writes_behind_the_seal",
        "a sealed segment is immutable: a sample at or before the newest sealed time is refused (OutOfOrder),"
        " never slipped into the head or a file",
        (APPEND,),
        _writes_behind_the_seal,
    ),
]


@needs(APPEND, SEAL, SEGMENTS)
@settings(max_examples=40)
@given(streams())
def test_seal_cuts_one_segment_per_window(steps: list[Step]) -> None:
    """Each seal cuts what it seals into one segment per window, named by its oldest and newest sample."""
    with opened(impl) as store:
        fill(store, steps)
        assert ranges(store.segments()) == [(g.min_ms, g.max_ms) for g in groups(steps)]


def near(steps: list[Step], pick: int, nudge: int) -> int:
    """A time at, just before or just after one of the samples: where an off-by-one shows."""
    return steps[pick % len(steps)].t + nudge


nudges = st.integers(-1, 1)
# A window from near one sample to near another (or a random one), of the series ``pick``.
windows = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 30), nudges, st.integers(0, 30), nudges, st.booleans()),
    min_size=1,
    max_size=4,
)


def window(steps: list[Step], asked: tuple[int, int, int, int, int, bool]) -> tuple[int, int]:
    _, first, nudge, last, nudge_end, wide = asked
    start = near(steps, first, nudge)
    end = max(start + 1, near(steps, last, nudge_end)) if not wide else start + 3 * WINDOW
    return start, end


@needs(APPEND, SEAL, QUERY)
@settings(max_examples=40)
@given(streams(), windows)
def test_a_query_reads_only_the_segments_its_window_meets(
    steps: list[Step], asked: list[tuple[int, int, int, int, int, bool]]
) -> None:
    """A query answers the window's samples, reading the segments it meets and skipping the rest.

    Read are the segments whose [min, max] meets the window; read + skipped is every segment."""
    present = sorted({s.series for s in steps})
    model = groups(steps)
    with opened(impl) as store:
        fill(store, steps)
        for question in asked:
            series, (start, end) = present[question[0] % len(present)], window(steps, question)
            result = store.query(series, start, end)
            assert result.samples == samples_of(series, steps, start, end), f"{series} in [{start}, {end})"
            read = sum(meets(g.min_ms, g.max_ms, start, end) for g in model)
            assert (result.segments_read, result.segments_skipped) == (read, len(model) - read), (
                f"[{start}, {end}) meets {read} of {len(model)} segments: {ranges(store.segments())}"
            )


@needs(APPEND, SEAL, SEGMENTS, QUERY)
def test_segments_outside_the_window_are_never_read() -> None:
    """A query reads no file of a segment outside its window: "skipped 5 of 6", and the same without them.

    Six windows sealed; the files of the five a query of one skips are removed, and it answers
    the same."""
    with opened(impl) as store:
        for t in range(50, 600, 50):
            store.append("a", t, float(t))
        store.seal()
        first = store.query("a", 250, 300)
        assert first.samples == [(250, 250.0)]
        assert (first.segments_read, first.segments_skipped) == (1, 5)
        for segment in store.segments():
            if not meets(segment.min_ms, segment.max_ms, 250, 300):
                os.remove(segment.path)
        assert store.query("a", 250, 300) == first


@needs(APPEND, SEAL, QUERY)
def test_the_head_is_answered_too() -> None:
    """Samples not sealed yet are answered from the head; sealing an empty head writes nothing."""
    with opened(impl) as store:
        assert store.seal() == []
        store.append("a", 10, 1.0)
        store.append("a", 20, 2.0)
        unsealed = store.query("a", 0, 100)
        assert (unsealed.samples, unsealed.segments_read, unsealed.segments_skipped) == ([(10, 1.0), (20, 2.0)], 0, 0)
        store.seal()
        store.append("a", 120, 3.0)
        both = store.query("a", 0, 200)
        assert (both.samples, both.segments_read, both.segments_skipped) == ([(10, 1.0), (20, 2.0), (120, 3.0)], 1, 0)


@needs(APPEND, SEAL, SEGMENTS, QUERY)
def test_a_sealed_segment_never_changes() -> None:
    """A sealed segment never changes: a sample behind what was sealed is refused (OutOfOrder).

    So is one not after its series' newest sample; the files stay as they were."""
    with opened(impl) as store:
        store.append("a", 10, 1.0)
        store.append("b", 20, 2.0)
        store.append("a", 30, 3.0)
        store.seal()
        kept = contents(store.segments())
        for series, t in (("b", 25), ("a", 30), ("c", 5)):
            with pytest.raises(impl.OutOfOrder):
                store.append(series, t, 9.0)
        store.append("a", 50, 5.0)
        with pytest.raises(impl.OutOfOrder):
            store.append("a", 40, 4.0)
        assert contents(store.segments()) == kept
        assert store.query("a", 0, 100).samples == [(10, 1.0), (30, 3.0), (50, 5.0)]


@needs(APPEND, SEAL, SEGMENTS, QUERY, RETAIN)
@settings(max_examples=40)
@given(streams(), st.integers(0, 30), nudges)
def test_retention_deletes_whole_files_past_the_cutoff(steps: list[Step], pick: int, nudge: int) -> None:
    """Retention deletes exactly the segments whose newest sample expired, and no byte of the others.

    Expired: older than now - retention. Every sample of a file that stays is still answered."""
    model = groups(steps)
    cutoff = near(steps, pick, nudge)
    now = cutoff + RETENTION
    expired = [g for g in model if g.max_ms < cutoff]
    kept = [g for g in model if g.max_ms >= cutoff]
    with opened(impl) as store:
        fill(store, steps)
        before = contents(store.segments())
        deleted = store.enforce_retention(now)
        assert ranges(deleted) == [(g.min_ms, g.max_ms) for g in expired]
        assert ranges(store.segments()) == [(g.min_ms, g.max_ms) for g in kept]
        assert [s.path for s in deleted if os.path.exists(s.path)] == []
        assert {p: before.get(p) for p in contents(store.segments())} == contents(store.segments())
        surviving = [step for g in kept for step in g.steps]
        for series in sorted({s.series for s in steps}):
            assert store.query(series, 0, 10 * WINDOW).samples == samples_of(series, surviving, 0, 10 * WINDOW)


@needs(APPEND, SEAL, SEGMENTS, QUERY, RETAIN)
def test_a_straddling_segment_stays_whole() -> None:
    """A segment straddling the cutoff stays whole until its newest sample expires.

    Segments [110, 190] and [250, 250]: at a cutoff of 160 nothing goes and 110 is still
    answered; at 200 the first file goes whole."""
    with opened(impl) as store:
        straddling(store)
        kept = contents(store.segments())
        assert store.enforce_retention(160 + RETENTION) == []
        assert contents(store.segments()) == kept
        assert store.query("a", 0, 300).samples == [(110, 110.0), (190, 190.0), (250, 250.0)]
        assert ranges(store.enforce_retention(200 + RETENTION)) == [(110, 190)]
        assert store.query("a", 0, 300).samples == [(250, 250.0)]

"""Which times a metrics write may carry: none the store's next maintenance pass would delete,
none implausibly far ahead of the server's clock.

A maintenance pass deletes whole segment files whose newest sample is older than its own clock
less the retention, so a segment goes only once all of it is past the retention. The next pass
runs up to one maintenance interval after the previous one ended, and a write may reach the
store while a pass is running, so the oldest accepted time keeps two intervals inside the
retention: a sample accepted at the server's clock ``now`` is at or after ``now + 2 intervals -
retention``, which no pass until then deletes (each keeps samples at or after its clock less the
retention), as long as a pass and a write's way to the store each take under an interval. (A
retention shorter than two intervals accepts nothing older than the server's clock.)

A refused old time is nearly always a unit mistake (seconds read as milliseconds land in January
1970), so the description says which unit the value looks like. No I/O here; the caller passes
the server's clock.
"""

from __future__ import annotations

from dataclasses import dataclass

# A node whose clock runs ahead would push samples "from the future" that then make every
# honest sample after them look out of order; refuse them instead.
MAX_FUTURE_MS = 5 * 60_000

_UNITS = (("seconds", 1_000), ("microseconds", 1 / 1_000), ("nanoseconds", 1 / 1_000_000))


# How many maintenance intervals the oldest accepted time keeps inside the retention: one until
# the next pass, one more for a pass in progress and the write's own way to the store.
PASSES_AHEAD = 2


@dataclass(frozen=True)
class SampleTimes:
    """The accepted times of one write: [oldest_ms, newest_ms], from the server's clock."""

    now_ms: int
    # None: the store keeps everything, so no time is too old (only not positive).
    retention_ms: int | None = None
    # How often the maintenance pass that applies the retention runs (0: only on demand).
    maintenance_interval_ms: int = 0

    @property
    def margin_ms(self) -> int:
        """How far inside the retention the oldest accepted time lies: ``PASSES_AHEAD`` maintenance
        intervals, and never more than the retention itself (the oldest time is at most now)."""
        if self.retention_ms is None:
            return 0
        return min(PASSES_AHEAD * self.maintenance_interval_ms, self.retention_ms)

    @property
    def oldest_ms(self) -> int:
        """The oldest accepted time: ``margin_ms`` inside the retention's edge, so the next
        maintenance pass keeps it, and never before the epoch's first ms."""
        if self.retention_ms is None:
            return 1
        return max(1, self.now_ms - self.retention_ms + self.margin_ms)

    @property
    def newest_ms(self) -> int:
        """The newest accepted time: ``MAX_FUTURE_MS`` ahead of the server's clock."""
        return self.now_ms + MAX_FUTURE_MS

    def accepts(self, value: int) -> bool:
        """Whether a sample at ``value`` ms is kept and plausible."""
        return self.oldest_ms <= value <= self.newest_ms

    def problem(self, value: int) -> str | None:
        """Why ``value`` is refused, for a field violation (None when it is accepted)."""
        if value <= 0:
            return f"must be a positive number of milliseconds since the epoch (got {value})"
        if value > self.newest_ms:
            ahead = _span(value - self.now_ms)
            limit = _span(MAX_FUTURE_MS)
            return f"{value} is {ahead} ahead of the server's clock (at most {limit}){self._unit_hint(value)}"
        if value < self.oldest_ms:
            assert self.retention_ms is not None  # oldest_ms is 1 without a retention
            age, retention = _span(self.now_ms - value), _span(self.retention_ms)
            # "less" the margin: kept short, so the unit hint still fits in the description.
            margin = f" less {_span(self.margin_ms)}" if self.margin_ms else ""
            return f"{value} is {age} old, past what retention keeps ({retention}{margin}){self._unit_hint(value)}"
        return None

    def _unit_hint(self, value: int) -> str:
        """The expected unit, and the one ``value`` looks like when read in it is acceptable."""
        for unit, to_ms in _UNITS:
            if self.accepts(int(value * to_ms)):
                return f": times are milliseconds since the epoch; this one looks like {unit}"
        return ": times are milliseconds since the epoch"


def _span(ms: int) -> str:
    """A duration for people: the largest unit that gives at least 2 of it ("45 days", "300 s")."""
    for unit, size in (("years", 365 * 86_400_000), ("days", 86_400_000), ("hours", 3_600_000), ("minutes", 60_000)):
        if ms >= 2 * size:
            return f"{ms // size} {unit}"
    return f"{ms / 1000:g} s"

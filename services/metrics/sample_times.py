"""Which times a metrics write may carry: none the store would delete at its next maintenance
pass (older than its retention), none implausibly far ahead of the server's clock.

A sample past the retention would be acknowledged, readable for a minute and then gone: the
maintenance pass deletes whole segment files older than the retention. Such a time is nearly
always a unit mistake (seconds read as milliseconds land in January 1970), so the description
says which unit the value looks like. No I/O here; the caller passes the server's clock.
"""

from __future__ import annotations

from dataclasses import dataclass

# A node whose clock runs ahead would push samples "from the future" that then make every
# honest sample after them look out of order; refuse them instead.
MAX_FUTURE_MS = 5 * 60_000

_UNITS = (("seconds", 1_000), ("microseconds", 1 / 1_000), ("nanoseconds", 1 / 1_000_000))


@dataclass(frozen=True)
class SampleTimes:
    """The accepted times of one write: [oldest_ms, newest_ms], from the server's clock."""

    now_ms: int
    # None: the store keeps everything, so no time is too old (only not positive).
    retention_ms: int | None = None

    @property
    def oldest_ms(self) -> int:
        """The oldest accepted time: the retention's edge, and never before the epoch's first ms."""
        return 1 if self.retention_ms is None else max(1, self.now_ms - self.retention_ms)

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
            return f"{value} is {age} old, past the metrics retention of {retention}{self._unit_hint(value)}"
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

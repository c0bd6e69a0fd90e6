"""The errors the tsdb raises; every one derives from TsdbError."""

from __future__ import annotations


class TsdbError(Exception):
    """Base of every error the tsdb raises on purpose."""


class InvalidArgumentError(TsdbError, ValueError):
    """A bad argument (labels, selector, window, array shapes, options); nothing was changed."""


class OutOfOrderError(TsdbError, ValueError):
    """Samples older than the head accepts for their series; the whole batch was rejected.

    `series_id`, `labels`, `timestamp_ms` and `newest_ms` name the first offending sample and the
    newest time its series already holds, or, when `behind_boundary`, the sealed boundary it fell
    behind (a store-wide time: the series itself may hold nothing). `series_id` is -1 for a
    series that a refused Store.append_labelled would have created.
    """

    def __init__(
        self,
        message: str,
        *,
        series_id: int,
        labels: dict[str, str],
        timestamp_ms: int,
        newest_ms: int,
        rejected: int,
        behind_boundary: bool = False,
    ) -> None:
        super().__init__(message)
        self.series_id = series_id
        self.labels = labels
        self.timestamp_ms = timestamp_ms
        self.newest_ms = newest_ms
        self.rejected = rejected
        self.behind_boundary = behind_boundary


class QueryTooLargeError(TsdbError):
    """A query would read more than the caller's limit: samples for a raw query, series times
    steps for a stepped one. Raised before the work (stepped) or as soon as the count passes
    the limit (raw), so memory stays bounded; nothing is returned.
    """

    def __init__(self, message: str, *, matched: int, limit: int) -> None:
        super().__init__(message)
        self.matched = matched
        self.limit = limit


class CorruptSegmentError(TsdbError):
    """A sealed segment file fails its checks (magic, CRC, layout); the file was not changed."""


class StateError(TsdbError):
    """The store's state file (``state.tss``: sealed boundary, next series id) exists but does not
    parse (bad magic, CRC, or content). Opening a store logs it and rebuilds the state from the
    segments and the WAL; only a direct read of the file raises it."""


class StoreClosedError(TsdbError):
    """The Store was closed (or failed); no method except close() may be called."""


class StoreLockedError(TsdbError):
    """Another Store (in this or another process) has the directory open."""


class WalError(TsdbError):
    """The write-ahead log could not be written or synced; the batch was not acknowledged."""

"""The segment-based metrics store: a library with no gRPC in it.

Samples go into an in-memory head and a write-ahead log; the head is cut into immutable segment
files by time window; queries prune segments by time from an in-memory manifest and answer
aggregates from per-series pre-aggregates where a step covers a whole chunk; retention deletes
whole files. See docs/tsdb.md.
"""

from tsdb.catalog import FIELD, GPU, NODE
from tsdb.errors import (
    CorruptSegmentError,
    InvalidArgumentError,
    OutOfOrderError,
    QueryTooLargeError,
    StateError,
    StoreClosedError,
    StoreLockedError,
    TsdbError,
    WalError,
)
from tsdb.model import QueryResult, QueryStats, RangeResult, RecoveryReport, RetentionReport, SegmentInfo, Series
from tsdb.store import Store

__all__ = [
    "FIELD",
    "GPU",
    "NODE",
    "CorruptSegmentError",
    "InvalidArgumentError",
    "OutOfOrderError",
    "QueryResult",
    "QueryStats",
    "QueryTooLargeError",
    "RangeResult",
    "RecoveryReport",
    "RetentionReport",
    "SegmentInfo",
    "Series",
    "StateError",
    "Store",
    "StoreClosedError",
    "StoreLockedError",
    "TsdbError",
    "WalError",
]

"""How many series the metrics store may hold.

Every series costs memory for as long as the server runs and a durable catalog record for
good: series are never deleted. The memory is a row of the store's in-memory head, 16 bytes for
each sample of the series' last one to three hours in slots sized for the busiest series, plus
its catalog entry: about 34 KB at 10 s pushes (2,048 slots), and up to twice that per series
because the head adds rows in doublings. So a node may have at most ``per_node`` series and the
store ``total``; a write that would create more is refused whole, before it registers any. The
counts are the store's own (``tsdb.Store.series_count``), so they hold across restarts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import tsdb
from services.errors import ResourceExhausted
from services.metrics.batch import SeriesBatch, SeriesRun


@dataclass(frozen=True)
class SeriesLimits:
    """The most series one node, and the whole store, may hold."""

    # 8 GPUs x 120 fields, or fewer fields and node-wide series besides.
    per_node: int = 1024
    # About 1,000 nodes of 8 GPUs x 12 fields. At 10 s pushes the head then takes about 4 GiB,
    # at most 7 GiB; a larger fleet raises it by the memory it gives the server (docs/api.md).
    total: int = 100_000

    def __post_init__(self) -> None:
        """Refuse a limit below 1: no node could ever write."""
        if self.per_node < 1 or self.total < 1:
            raise ValueError(f"series limits must be at least 1 (per node {self.per_node}, total {self.total})")


def check_room(store: tsdb.Store, limits: SeriesLimits, batch: SeriesBatch, new: Sequence[SeriesRun]) -> None:
    """RESOURCE_EXHAUSTED (SERIES_LIMIT_EXCEEDED) when creating the series of ``new`` (runs of
    ``batch`` the store does not hold) would put a node, or the store, past its limit; the first
    node over it is named, with the numbers. Runs on the store's thread."""
    for node_id, adding in sorted(Counter(run.labels[tsdb.NODE] for run in new).items()):
        held = store.series_count({tsdb.NODE: node_id})
        if held + adding > limits.per_node:
            raise ResourceExhausted(
                reason="SERIES_LIMIT_EXCEEDED",
                message=(
                    f"node {node_id!r} has {held} series and this write would add {adding}, past the limit of "
                    f"{limits.per_node} per node; nothing was written: write fewer distinct fields or labels"
                ),
                metadata={
                    "limit_scope": "node",
                    "node_id": node_id,
                    "field": batch.node_paths[node_id],
                    "series": str(held),
                    "new_series": str(adding),
                    "limit": str(limits.per_node),
                },
            )
    total = store.series_count({})
    if total + len(new) > limits.total:
        raise ResourceExhausted(
            reason="SERIES_LIMIT_EXCEEDED",
            message=(
                f"the metrics store has {total} series and this write would add {len(new)}, past its limit "
                f"of {limits.total}; nothing was written: an operator must raise the limit"
            ),
            metadata={
                "limit_scope": "store",
                "series": str(total),
                "new_series": str(len(new)),
                "limit": str(limits.total),
            },
        )

"""What each replica answers agents: every node's record, held in memory and refreshed.

Heartbeat must be answered without touching the database, yet with the node's current state
and actions. Each replica keeps every node's record (services/fleet/repository.py NodeRecord)
and re-reads, every ``refresh_s``, the nodes whose state changed since shortly before its last
read, with a full read now and then for the flags a state change does not stamp. A node this
replica moves is updated at once; one moved elsewhere shows within a refresh. An agent's open
stream ``watch``es its node and is woken when the node's instructions change.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

from services.fabric import partitions
from services.fleet import repository as repo
from services.fleet.actions import Action, action_for
from services.fleet.repository import NodeRecord
from services.nodes.transitions import NodeState
from services.store.engine import Database

log = structlog.get_logger(__name__)

# How far before its last read a refresh looks again: a transaction stamps its time before it
# commits, and another replica's clock may run behind this one's.
OVERLAP_US = 5_000_000
# Every this many refreshes, read every node (the reachability flag changes no timestamp).
FULL_EVERY = 30


@dataclass(frozen=True, slots=True)
class Instructions:
    """What an agent is told: its node's state, the action it asks for, how often to beat."""

    desired_state: NodeState
    actions: tuple[Action, ...]
    heartbeat_interval_ms: int
    partition_keys: tuple[int, ...] = ()


class Directives:
    """This replica's view of every node, for answering agents."""

    def __init__(self, store: Database, *, refresh_s: float, heartbeat_interval_s: float) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self._interval_ms = round(heartbeat_interval_s * 1000)
        self._nodes: dict[str, NodeRecord] = {}
        self._watermark_us: int | None = None
        # When each node's record was last put from a transaction of this replica
        # (time.monotonic): a refresh that began before that read an older record.
        self._put_at: dict[str, float] = {}
        # The events of the streams watching each node.
        self._watchers: dict[str, set[asyncio.Event]] = {}

    def put(self, record: NodeRecord, *, read_at: float | None = None) -> None:
        """Take ``record``, read at ``read_at`` (``time.monotonic``; None: just now, by a
        transaction of this replica), unless the one held is of a later state change or was
        put after ``read_at``."""
        held = self._nodes.get(record.node_id)
        if held is not None and record.state_changed_us < held.state_changed_us:
            return
        if read_at is None:
            self._put_at[record.node_id] = time.monotonic()
        elif self._put_at.get(record.node_id, -math.inf) > read_at:
            return
        self._nodes[record.node_id] = record
        if held is None or _instructed(held) != _instructed(record):
            for changed in self._watchers.get(record.node_id, ()):
                changed.set()

    @contextmanager
    def watch(self, node_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever the node's instructions may have changed, for as long as the
        block runs; ``wake_all`` sets it too."""
        changed = asyncio.Event()
        watchers = self._watchers.setdefault(node_id, set())
        watchers.add(changed)
        try:
            yield changed
        finally:
            watchers.discard(changed)
            if not watchers:
                del self._watchers[node_id]

    def wake_all(self) -> None:
        """Set every watcher's event (the server is stopping: the streams look and end)."""
        for watchers in self._watchers.values():
            for changed in watchers:
                changed.set()

    async def lookup(self, node_id: str) -> NodeRecord | None:
        """The node's record: from memory, or read once for a node registered elsewhere."""
        record = self._nodes.get(node_id)
        return record if record is not None else await self.reread(node_id)

    async def reread(self, node_id: str) -> NodeRecord | None:
        """The node's record as the store holds it now, kept here too: what a move by another
        part of this replica (a cancel, a release) shows before the next refresh."""
        read_at = time.monotonic()
        record = await self._store.query(repo.record(node_id))
        if record is not None:
            self.put(record, read_at=read_at)
        return record

    def instructions(self, record: NodeRecord) -> Instructions:
        """What the node's agent is told now."""
        action = action_for(record.state, record.state_changed_us, agent_managed=record.agent_managed)
        actions = () if action is None else (action,)
        return Instructions(
            record.state, actions, self._interval_ms, partitions.expected(record.state, record.tenant_key)
        )

    async def refresh(self, *, full: bool = False) -> int:
        """Re-read the nodes changed since shortly before the last read (all when ``full``)."""
        since = None if full or self._watermark_us is None else self._watermark_us - OVERLAP_US
        read_at = time.monotonic()
        records = await self._store.query(repo.records_changed_since(since))
        for record in records:
            self.put(record, read_at=read_at)
            if self._watermark_us is None or record.state_changed_us > self._watermark_us:
                self._watermark_us = record.state_changed_us
        return len(records)

    async def run(self) -> None:
        """Refresh every ``refresh_s`` until cancelled; a failed refresh is logged and retried."""
        count = 0
        while True:
            try:
                await self.refresh(full=count % FULL_EVERY == 0)
            except Exception as error:
                log.warning("directives_refresh_failed", error=repr(error))
            count += 1
            await asyncio.sleep(self._refresh_s)


def _instructed(record: NodeRecord) -> tuple[NodeState, int, bool, int | None]:
    """What of a record the instructions are made of (``Directives.instructions``)."""
    return record.state, record.state_changed_us, record.agent_managed, record.tenant_key

"""What ``gpucloud nodes watch`` shows of one read of the fleet: how many nodes are in each state
(every state of the lifecycle, in its order, zeros included), per GPU model, in all, and which
nodes changed state since the previous read. No I/O: the command reads, this summarises."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from clients import models
from gpucloud.v1 import node_pb2

# The node states in lifecycle order (the enum's order), without UNSPECIFIED.
STATES: tuple[str, ...] = tuple(name.removeprefix("NODE_STATE_") for name in node_pb2.NodeState.keys()[1:])

# How many changes a summary carries, and how many the live view keeps across reads.
CHANGES_SHOWN = 10


@dataclass(frozen=True)
class StateChange:
    """A node whose state differs between two reads; ``None`` where it was not in a read
    (registered since the previous one, or no longer listed)."""

    node_id: str
    from_state: str | None
    to_state: str | None
    read_time: datetime

    def __str__(self) -> str:
        return f"{self.node_id} {self.from_state or '(new)'} -> {self.to_state or '(gone)'}"


@dataclass(frozen=True)
class FleetSummary:
    """One read of the fleet: node counts per state (every state, lifecycle order; a state this
    client does not know, from a newer server, after them), per GPU model and state, the total,
    when it was read, how many nodes ``changed`` state since the previous read, and the last
    ``CHANGES_SHOWN`` of those ``changes``, by node id."""

    read_time: datetime
    total: int
    states: dict[str, int]
    models: dict[str, dict[str, int]]
    changed: int
    changes: tuple[StateChange, ...]


def node_states(nodes: Iterable[models.Node]) -> dict[str, str]:
    """Each node's state by node id."""
    return {node.node_id: node.state for node in nodes}


def _state_counts(states: Iterable[str]) -> dict[str, int]:
    """Counts of ``states``: every known state in lifecycle order, then unknown ones by name."""
    counted = Counter(states)
    unknown = sorted(state for state in counted if state not in STATES)
    return {state: counted[state] for state in (*STATES, *unknown)}


def state_changes(
    previous: Mapping[str, str] | None, current: Mapping[str, str], read_time: datetime
) -> list[StateChange]:
    """The nodes whose state differs from ``previous`` to ``current`` (state by node id), by node
    id; none when there is no previous read."""
    if previous is None:
        return []
    return [
        StateChange(node_id, previous.get(node_id), current.get(node_id), read_time)
        for node_id in sorted(previous.keys() | current.keys())
        if previous.get(node_id) != current.get(node_id)
    ]


def summarize(nodes: Sequence[models.Node], previous: Mapping[str, str] | None, read_time: datetime) -> FleetSummary:
    """The summary of ``nodes`` read at ``read_time``, with the changes since ``previous`` (each
    node's state by id at the read before; ``None`` for a first read)."""
    changes = state_changes(previous, node_states(nodes), read_time)
    by_model: dict[str, list[str]] = {}
    for node in nodes:
        by_model.setdefault(node.gpu_model, []).append(node.state)
    return FleetSummary(
        read_time=read_time,
        total=len(nodes),
        states=_state_counts(node.state for node in nodes),
        models={model: _state_counts(by_model[model]) for model in sorted(by_model)},
        changed=len(changes),
        changes=tuple(changes[-CHANGES_SHOWN:]),
    )


class FleetWatch:
    """Successive reads of the fleet: each summarised against the one before, and the last
    ``CHANGES_SHOWN`` changes over all reads kept for a live view."""

    def __init__(self) -> None:
        self._previous: dict[str, str] | None = None
        self._recent: deque[StateChange] = deque(maxlen=CHANGES_SHOWN)

    def observe(self, nodes: Sequence[models.Node], read_time: datetime) -> FleetSummary:
        """Summarise a new read of every node, against the previous read."""
        summary = summarize(nodes, self._previous, read_time)
        self._previous = node_states(nodes)
        self._recent.extend(summary.changes)
        return summary

    @property
    def recent(self) -> tuple[StateChange, ...]:
        """The last changes seen over all reads, oldest first."""
        return tuple(self._recent)


def _timestamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def summary_json(summary: FleetSummary) -> dict[str, Any]:
    """``summary`` as one JSON object: read time, total, counts per state and per GPU model, the
    number of nodes changed since the previous read and the last of those changes."""
    return {
        "read_time": _timestamp(summary.read_time),
        "total": summary.total,
        "states": summary.states,
        "models": {
            model: {"total": sum(counts.values()), "states": counts} for model, counts in summary.models.items()
        },
        "changed": summary.changed,
        "changes": [
            {"node_id": c.node_id, "from_state": c.from_state, "to_state": c.to_state} for c in summary.changes
        ],
    }

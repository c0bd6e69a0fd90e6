"""Persistence of health strikes, and the reads the health controller decides from, as
transaction steps (store/tx.py). Node states move only through services/nodes/repository.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.health.policy import Observation
from services.nodes.repository import EVENT_COLUMNS, NodeEventEntry
from services.nodes.transitions import NodeEvent, NodeState
from services.store.tx import Sql, Tx

# A node in one of these is out of service already: no decision can remove it further. A
# DRAINING node is still its tenant's, and a fault that cannot wait takes it from the tenant.
OUT_OF_SERVICE = frozenset({NodeState.QUARANTINED, NodeState.REPAIR, NodeState.RETIRED})
# The events that settle a decision: it was applied (a drain) or recorded (nothing to remove).
SETTLING = (NodeEvent.DRAIN.value, NodeEvent.HEALTH.value)


def record(node_id: str, strikes: Sequence[Observation]) -> Tx[None]:
    """Store the strikes one status (or sweep) of ``node_id`` carried, each at its own time. A
    status sent again (an agent retrying a report whose answer it lost) stores nothing twice,
    and neither does an XID its agent's journal replays (the same time and journal number).

    A strike is known by (node, time, seq). A journaled XID's seq is its journal number,
    negated, and it is also known by (node, the agent's own time, seq): the time it counts at
    is clamped to its status's arrival (an agent clock ahead, a fault more than a day old),
    which a replay does not share. Any other strike's seq is its place among the strikes of its
    status at that instant (0, 1, ...), which a resent status gives alike. The signs keep the
    two apart; a journal that starts again at 1 (its file lost) does so at later times."""
    if not strikes:
        return
    rows = []
    seqs: dict[int, int] = {}
    for strike in strikes:
        at_us = round(strike.at_s * 1e6)
        if strike.journal_seq is not None:
            seq = -strike.journal_seq
        else:
            seq = seqs[at_us] = seqs.get(at_us, -1) + 1
        rows.append(
            {
                "node_id": node_id,
                "at_us": at_us,
                "seq": seq,
                "gpu": strike.gpu,
                "signal": strike.signal,
                "agent_ms": strike.journal_ms,
            }
        )
    yield Sql(
        "INSERT INTO health_observations (node_id, at_us, seq, gpu_index, signal, agent_ms)"
        " VALUES (:node_id, :at_us, :seq, :gpu, :signal, :agent_ms) ON CONFLICT DO NOTHING",
        rows=rows,
    )


@dataclass(frozen=True, slots=True)
class NodeHealthView:
    """What one health decision about a node reads, in one snapshot."""

    node_id: str
    gpu_model: str
    leaf_switch: str
    state: NodeState
    strikes: list[Observation]
    # The health controller's last event about the node that settled a decision, and the last
    # that held one back (None: none since the strikes read began).
    settled_us: int | None
    held_us: int | None


def view(node_id: str, *, since_us: int, actor: str) -> Tx[NodeHealthView | None]:
    """The node, its strikes at or after ``since_us`` and since it last returned to service
    (oldest first), and ``actor``'s last settling and holding events since then; None for an
    unknown node. A repair clears the strikes before it: a replaced part does not inherit
    the faults of the one it replaced."""
    found = (yield Sql("SELECT gpu_model, leaf_switch, state FROM nodes WHERE node_id = :id", {"id": node_id})).first()
    if found is None:
        return None
    returned = (
        yield Sql(
            "SELECT MAX(at_us) FROM node_events WHERE node_id = :id AND event = :returned",
            {"id": node_id, "returned": NodeEvent.RETURN_TO_SERVICE.value},
        )
    ).first()
    if returned is not None and returned[0] is not None:
        since_us = max(since_us, int(returned[0]))
    rows = (
        yield Sql(
            "SELECT signal, at_us, gpu_index FROM health_observations WHERE node_id = :id AND at_us >= :since"
            " ORDER BY at_us, seq",
            {"id": node_id, "since": since_us},
        )
    ).rows
    strikes = [Observation(str(signal), int(at) / 1e6, None if gpu is None else int(gpu)) for signal, at, gpu in rows]
    events = (
        yield Sql(
            "SELECT event, MAX(at_us) FROM node_events WHERE node_id = :id AND actor = :actor AND at_us >= :since"
            " AND event IN (:drain, :health, :held) GROUP BY event",
            {
                "id": node_id,
                "actor": actor,
                "since": since_us,
                "drain": NodeEvent.DRAIN.value,
                "health": NodeEvent.HEALTH.value,
                "held": NodeEvent.HEALTH_HELD.value,
            },
        )
    ).rows
    latest = {str(event): int(at) for event, at in events}
    settled = max((latest[e] for e in SETTLING if e in latest), default=None)
    model, leaf, state = found
    return NodeHealthView(node_id, str(model), str(leaf), NodeState(state), strikes, settled, latest.get("HEALTH_HELD"))


def struck_since(since_us: int) -> Tx[list[str]]:
    """The in-service nodes with a strike at or after ``since_us``."""
    out = sorted(state.value for state in OUT_OF_SERVICE)
    result = yield Sql(
        "SELECT DISTINCT o.node_id FROM health_observations o JOIN nodes n ON n.node_id = o.node_id"
        f" WHERE o.at_us >= :since AND n.state NOT IN ({', '.join(f':s{i}' for i in range(len(out)))})",
        {"since": since_us, **{f"s{i}": state for i, state in enumerate(out)}},
    )
    return [str(row[0]) for row in result.rows]


@dataclass(frozen=True, slots=True)
class Pool:
    """What a removal from the pool of one GPU model is weighed against."""

    # Nodes the health controller drained since the window began, and the pool's size.
    drained: int
    size: int
    automation: Automation
    # Nodes under the node's leaf switch (any model) the health controller drained since then.
    leaf_drained: int


def pool(gpu_model: str, leaf_switch: str, *, since_us: int, actor: str) -> Tx[Pool]:
    """The pool of ``gpu_model``: how many of its nodes ``actor`` drained at or after
    ``since_us``, how many it has (not retired), whether an operator paused it; and how many
    nodes under ``leaf_switch`` ``actor`` drained since then."""
    drained = (
        yield Sql(
            "SELECT COUNT(DISTINCT CASE WHEN n.gpu_model = :model THEN e.node_id END),"
            " COUNT(DISTINCT CASE WHEN n.leaf_switch = :leaf THEN e.node_id END)"
            " FROM node_events e JOIN nodes n ON n.node_id = e.node_id"
            " WHERE (n.gpu_model = :model OR n.leaf_switch = :leaf)"
            " AND e.event = :drain AND e.actor = :actor AND e.at_us >= :since",
            {
                "model": gpu_model,
                "leaf": leaf_switch,
                "drain": NodeEvent.DRAIN.value,
                "actor": actor,
                "since": since_us,
            },
        )
    ).first()
    size = (
        yield Sql(
            "SELECT COUNT(*) FROM nodes WHERE gpu_model = :model AND state <> :retired",
            {"model": gpu_model, "retired": NodeState.RETIRED.value},
        )
    ).first()
    setting = yield from automation(gpu_model)
    in_pool, under_leaf = (0, 0) if drained is None else (int(drained[0] or 0), int(drained[1] or 0))
    return Pool(in_pool, 0 if size is None else int(size[0]), setting, under_leaf)


@dataclass(frozen=True, slots=True)
class Automation:
    """A pool's automation setting as stored; ``updated_us`` is None for a pool never set."""

    gpu_model: str
    paused: bool
    reason: str
    actor: str
    updated_us: int | None


def automation(gpu_model: str) -> Tx[Automation]:
    """``gpu_model``'s setting: automated unless an operator paused it."""
    found = (
        yield Sql(
            "SELECT paused, reason, actor, updated_us FROM health_automation WHERE gpu_model = :model",
            {"model": gpu_model},
        )
    ).first()
    if found is None:
        return Automation(gpu_model, False, "", "", None)
    paused, reason, actor, updated = found
    return Automation(gpu_model, bool(paused), str(reason), str(actor), int(updated))


def set_automation(gpu_model: str, *, paused: bool, reason: str, actor: str, now_us: int) -> Tx[Automation]:
    """Pause or resume ``gpu_model``'s removals; a setting that does not change is not written
    again (its actor and time stay those of the change)."""
    before = yield from automation(gpu_model)
    if before.updated_us is not None and (before.paused, before.reason) == (paused, reason):
        return before
    yield Sql(
        "INSERT INTO health_automation (gpu_model, paused, reason, actor, updated_us)"
        " VALUES (:model, :paused, :reason, :actor, :now) ON CONFLICT (gpu_model) DO UPDATE SET"
        " paused = excluded.paused, reason = excluded.reason, actor = excluded.actor, updated_us = excluded.updated_us",
        {"model": gpu_model, "paused": paused, "reason": reason, "actor": actor, "now": now_us},
    )
    return Automation(gpu_model, paused, reason, actor, now_us)


def decisions(*, since_us: int | None, after_seq: int | None, limit: int, actor: str) -> Tx[list[NodeEventEntry]]:
    """``actor``'s health decisions across the fleet, oldest first: its DRAIN, HEALTH and
    HEALTH_HELD events at or after ``since_us``, after ``after_seq`` (the keyset)."""
    sql = f"SELECT {EVENT_COLUMNS} FROM node_events WHERE actor = :actor AND event IN (:drain, :health, :held)"
    params: dict[str, Any] = {
        "actor": actor,
        "drain": NodeEvent.DRAIN.value,
        "health": NodeEvent.HEALTH.value,
        "held": NodeEvent.HEALTH_HELD.value,
        "limit": limit,
    }
    if since_us is not None:
        sql += " AND at_us >= :since"
        params["since"] = since_us
    if after_seq is not None:
        sql += " AND event_seq > :after"
        params["after"] = after_seq
    result = yield Sql(sql + " ORDER BY event_seq LIMIT :limit", params)
    return [NodeEventEntry(*row) for row in result.rows]

"""Persistence of what agents report and of the fleet's heartbeats, as transaction steps
(store/tx.py). Node states themselves move only through services/nodes/repository.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.fleet.actions import action_for
from services.health import repository as health_repo
from services.health.policy import Observation
from services.health.signals import GpuReading, observations
from services.nodes.repository import GpuDetails, Node
from services.nodes.transitions import NodeState
from services.store.tx import Sql, Tx, for_update

# The states that wait for something (an agent's result, a timeout, a tenant's release): a
# node moved into one is reconciled again at once.
IN_PROGRESS = frozenset({NodeState.REGISTERED, NodeState.BURN_IN, NodeState.SCRUBBING, NodeState.DRAINING})


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What the reconciler and the answers to agents need of a node."""

    node_id: str
    gpu_model: str
    state: NodeState
    state_changed_us: int
    agent_managed: bool
    unreachable: bool
    drain_pending: bool
    last_heartbeat_us: int | None
    # The partition key of the tenant holding the node; None when none holds it.
    tenant_key: int | None = None


@dataclass(frozen=True, slots=True)
class ResultRecord:
    """An action's result as stored: the figures or report as JSON, or the agent's error."""

    action_id: str
    kind: str
    result_json: str
    error: str


_RECORD = (
    "node_id, gpu_model, state, state_changed_us, agent_managed, unreachable, drain_pending, last_heartbeat_us,"
    " (SELECT p.partition_key FROM assignments a JOIN partition_keys p ON p.tenant_id = a.tenant_id"
    " WHERE a.node_id = nodes.node_id AND a.released_us IS NULL)"
)


def _record(values: Sequence[Any]) -> NodeRecord:
    node_id, model, state, changed, agent, unreachable, drain, beat, key = values
    # SQLite hands booleans back as 0/1.
    return NodeRecord(
        str(node_id),
        str(model),
        NodeState(state),
        int(changed),
        bool(agent),
        bool(unreachable),
        bool(drain),
        beat,
        None if key is None else int(key),
    )


def record(node_id: str, *, locking: bool = False) -> Tx[NodeRecord | None]:
    """The node's record, locked for the transaction when ``locking``; None if unknown."""
    sql = f"SELECT {_RECORD} FROM nodes WHERE node_id = :id" + for_update(locking)
    found = (yield Sql(sql, {"id": node_id})).first()
    return None if found is None else _record(found)


def records_changed_since(since_us: int | None) -> Tx[list[NodeRecord]]:
    """Every node whose state changed at or after ``since_us`` (every node for None)."""
    if since_us is None:
        result = yield Sql(f"SELECT {_RECORD} FROM nodes")
    else:
        result = yield Sql(f"SELECT {_RECORD} FROM nodes WHERE state_changed_us >= :since", {"since": since_us})
    return [_record(r) for r in result.rows]


def record_of(row: Node, *, last_heartbeat_us: int | None) -> NodeRecord:
    """The record of a node row read with its view."""
    return NodeRecord(
        row.node_id,
        row.gpu_model,
        NodeState(row.state),
        row.state_changed_us,
        row.agent_managed,
        row.unreachable,
        row.drain_pending,
        last_heartbeat_us,
    )


def actionable(cutoffs: Mapping[NodeState, int]) -> Tx[list[str]]:
    """The agent-managed nodes a reconcile would move now, or might: REGISTERED ones, those in
    a state of ``cutoffs`` since before its cutoff (timed out), and those with a result
    reported since they entered their state."""
    params: dict[str, Any] = {"registered": NodeState.REGISTERED.value}
    timed_out = []
    for i, (state, cutoff) in enumerate(cutoffs.items()):
        params[f"s{i}"], params[f"c{i}"] = state.value, cutoff
        timed_out.append(f"(n.state = :s{i} AND n.state_changed_us < :c{i})")
    result = yield Sql(
        "SELECT n.node_id FROM nodes n WHERE n.agent_managed = TRUE AND (n.state = :registered"
        f" OR {' OR '.join(timed_out)}"
        " OR EXISTS (SELECT 1 FROM action_results r WHERE r.node_id = n.node_id"
        " AND r.reported_us >= n.state_changed_us))",
        params,
    )
    return [str(r[0]) for r in result.rows]


def observed(node_id: str) -> Tx[tuple[NodeRecord | None, ResultRecord | None]]:
    """The node's record and its agent's result for the node's current action, in one snapshot."""
    found = yield from record(node_id)
    if found is None or not found.agent_managed:
        return found, None
    action = action_for(found.state, found.state_changed_us, agent_managed=True)
    if action is None:
        return found, None
    return found, (yield from result_of(node_id, action.action_id))


def adopt(
    node_id: str, gpus: Sequence[tuple[int, GpuDetails]], status: StatusReport | None, *, now_us: int
) -> Tx[None]:
    """Mark the node managed by its agent, heard from now, with its GPUs as the agent describes
    them and the status it registered with (stored as ``save_report`` stores one)."""
    yield Sql(
        "UPDATE nodes SET agent_managed = TRUE, last_heartbeat_us = :now WHERE node_id = :id",
        {"id": node_id, "now": now_us},
    )
    if gpus:
        yield Sql(
            "UPDATE gpus SET name = :name, serial = :serial, memory_bytes = :memory_bytes,"
            " driver_version = :driver_version, vbios_version = :vbios_version,"
            " inforom_version = :inforom_version, rail = :rail WHERE node_id = :node_id AND gpu_index = :index",
            rows=[
                {
                    "node_id": node_id,
                    "index": index,
                    "name": d.name,
                    "serial": d.serial,
                    "memory_bytes": d.memory_bytes,
                    "driver_version": d.driver_version,
                    "vbios_version": d.vbios_version,
                    "inforom_version": d.inforom_version,
                    "rail": d.rail,
                }
                for index, d in gpus
            ],
        )
    if status is not None:
        yield from save_report(node_id, status, (), now_us=now_us)


@dataclass(frozen=True, slots=True)
class StatusReport:
    """A status as an agent reported it: stored as ``json``, read by the health signals as
    ``readings``; ``stored`` reads a status stored earlier the same way."""

    json: str
    readings: Sequence[GpuReading]
    stored: Callable[[str], Sequence[GpuReading]]


def save_report(node_id: str, status: StatusReport | None, results: Sequence[ResultRecord], *, now_us: int) -> Tx[int]:
    """Store the node's status (replacing the last), the strikes it carries (services/health),
    and any results not stored yet; the number of strikes."""
    strikes: list[Observation] = []
    if status is not None:
        before = None
        # A counter at zero cannot have risen: only then is the status before it worth decoding.
        if any(gpu.ecc_corrected_total or gpu.ecc_uncorrected_total for gpu in status.readings):
            previous = yield from status_of(node_id)
            before = None if previous is None else {gpu.index: gpu for gpu in status.stored(previous)}
        strikes = observations(status.readings, before, now_us / 1e6)
        yield from health_repo.record(node_id, strikes)
        yield Sql(
            "INSERT INTO node_status (node_id, status_json, reported_us) VALUES (:id, :status, :now)"
            " ON CONFLICT (node_id) DO UPDATE SET status_json = excluded.status_json,"
            " reported_us = excluded.reported_us",
            {"id": node_id, "status": status.json, "now": now_us},
        )
    if results:
        yield Sql(
            "INSERT INTO action_results (node_id, action_id, kind, result_json, error, reported_us)"
            " VALUES (:node_id, :action_id, :kind, :result_json, :error, :now)"
            " ON CONFLICT (node_id, action_id) DO NOTHING",
            rows=[
                {
                    "node_id": node_id,
                    "action_id": r.action_id,
                    "kind": r.kind,
                    "result_json": r.result_json,
                    "error": r.error[:256],
                    "now": now_us,
                }
                for r in results
            ],
        )
    return len(strikes)


def status_of(node_id: str) -> Tx[str | None]:
    """The node's last reported status (JSON), None if it never reported one."""
    found = (yield Sql("SELECT status_json FROM node_status WHERE node_id = :id", {"id": node_id})).first()
    return None if found is None else str(found[0])


def result_of(node_id: str, action_id: str) -> Tx[ResultRecord | None]:
    """The stored result of one action of a node, if its agent has reported it."""
    found = (
        yield Sql(
            "SELECT action_id, kind, result_json, error FROM action_results"
            " WHERE node_id = :id AND action_id = :action",
            {"id": node_id, "action": action_id},
        )
    ).first()
    return None if found is None else ResultRecord(*(str(v) for v in found))


def burn_in_results(gpu_model: str, *, most: int) -> Tx[list[str]]:
    """The successful burn-in results (JSON) of nodes of ``gpu_model``, the latest ``most`` of
    them, one per node (its latest), newest first. Walks ``ix_action_results_kind_reported``
    backwards: the cost is ``most``, not the fleet's size."""
    result = yield Sql(
        "SELECT r.node_id, r.result_json FROM action_results r JOIN nodes n ON n.node_id = r.node_id"
        " WHERE r.kind = :kind AND r.error = '' AND n.gpu_model = :model ORDER BY r.reported_us DESC LIMIT :most",
        {"model": gpu_model, "kind": "burn_in", "most": most},
    )
    latest: dict[str, str] = {}
    for node_id, figures in result.rows:
        latest.setdefault(str(node_id), str(figures))
    return list(latest.values())


def fleet_size(gpu_model: str) -> Tx[int]:
    """How many agent-managed nodes of ``gpu_model`` are in the fleet (not retired)."""
    found = (
        yield Sql(
            "SELECT COUNT(*) FROM nodes WHERE gpu_model = :model AND agent_managed = TRUE AND state <> :retired",
            {"model": gpu_model, "retired": NodeState.RETIRED.value},
        )
    ).first()
    return 0 if found is None else int(found[0])


def touch_heartbeats(beats: Sequence[tuple[str, int]]) -> Tx[None]:
    """Record when each node was last heard, never moving a time backwards."""
    if beats:
        yield Sql(
            "UPDATE nodes SET last_heartbeat_us = :at WHERE node_id = :id"
            " AND (last_heartbeat_us IS NULL OR last_heartbeat_us < :at)",
            rows=[{"id": node_id, "at": at} for node_id, at in beats],
        )


def heard_before(cutoff_us: int, *, unreachable: bool) -> Tx[list[tuple[str, int | None]]]:
    """Agent-managed, unretired nodes with the given ``unreachable`` flag, and their last
    recorded heartbeat: for reachable ones only those last heard before ``cutoff_us``."""
    sql = (
        "SELECT node_id, last_heartbeat_us FROM nodes WHERE agent_managed = TRUE AND state <> :retired"
        " AND unreachable = :flag"
    )
    if not unreachable:
        sql += " AND (last_heartbeat_us IS NULL OR last_heartbeat_us < :cutoff)"
    result = yield Sql(sql, {"retired": NodeState.RETIRED.value, "flag": unreachable, "cutoff": cutoff_us})
    return [(str(node_id), None if beat is None else int(beat)) for node_id, beat in result.rows]


def set_unreachable(node_id: str, flag: bool) -> Tx[bool]:
    """Flip the node's ``unreachable`` flag to ``flag``; False (nothing written) when it already was."""
    result = yield Sql(
        "UPDATE nodes SET unreachable = :flag WHERE node_id = :id AND unreachable <> :flag",
        {"id": node_id, "flag": flag},
    )
    return result.rowcount == 1


def recorded_since(node_id: str, event: str, since_us: int) -> Tx[bool]:
    """Whether the node's history has ``event`` at or after ``since_us``."""
    found = (
        yield Sql(
            "SELECT 1 FROM node_events WHERE node_id = :id AND event = :event AND at_us >= :since LIMIT 1",
            {"id": node_id, "event": event, "since": since_us},
        )
    ).first()
    return found is not None

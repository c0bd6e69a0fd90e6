"""What operators and agents do to nodes: each command is one transaction through the table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from services.auth.principal import Principal, Role
from services.clock import now_us
from services.errors import AlreadyExists, FailedPrecondition, PermissionDenied
from services.nodes import repository as repo
from services.nodes.inventory import Inventory, canonical_gpu_uuid
from services.nodes.repository import Node, NodeView
from services.nodes.transitions import HELD_STATES, NodeEvent, NodeState
from services.store.engine import Database
from services.store.tx import Refused, Tx


def check_speaks_for(principal: Principal, node_id: str) -> None:
    """An agent may act only on its own node."""
    if principal.role is Role.AGENT and principal.node_id != node_id:
        raise PermissionDenied(
            reason="AGENT_NODE_MISMATCH",
            message=f"this agent speaks for node {principal.node_id!r}, not {node_id!r}",
            metadata={"node_id": node_id},
        )


def _inventory_differences(view: NodeView, inventory: Inventory) -> list[str]:
    """The RegisterNode fields whose values differ from the node as registered, in request order."""
    row = view.row
    registered = sorted((canonical_gpu_uuid(g.gpu_uuid), g.gpu_index) for g in view.gpus)
    return [
        name
        for name, same in (
            ("gpu_model", row.gpu_model == inventory.gpu_model),
            ("gpus", registered == sorted((g.uuid, g.index) for g in inventory.gpus)),
            ("zone", row.zone == inventory.zone),
            ("rack", row.rack == inventory.rack),
            ("leaf_switch", row.leaf_switch == inventory.leaf_switch),
        )
        if not same
    ]


async def register(
    store: Database, principal: Principal, inventory: Inventory, *, then: Callable[[], Tx[None]] | None = None
) -> NodeView:
    """Register a node and start its burn-in; re-registering the same inventory is a no-op,
    also when the registrations run at once (an agent retrying, two agents racing). ``then``
    runs in the same transaction once the node is known, so that nobody reads the node
    without what it writes (its agent's adoption)."""
    check_speaks_for(principal, inventory.node_id)
    try:
        return await store.transact(partial(_register, inventory, actor=principal.actor, then=then))
    except Refused:
        pass
    # A concurrent registration of the node or one of its GPUs won: answer as if this call had
    # come second, which is what the winner's commit now shows.
    known = await store.query(_registered(inventory))
    if known is not None:
        if then is None:
            return known
        await store.transact(then)
        return await store.query(repo.get_view(inventory.node_id))
    raise AlreadyExists(
        reason="NODE_REGISTERED_CONCURRENTLY",
        message=f"node {inventory.node_id!r} or one of its GPUs was registered concurrently; retry to compare",
        metadata={"node_id": inventory.node_id},
    )


def _register(inventory: Inventory, *, actor: str, then: Callable[[], Tx[None]] | None) -> Tx[NodeView]:
    known = yield from _registered(inventory)
    if known is None:
        now = now_us()
        row = yield from repo.insert(inventory, actor=actor, now_us=now)
        yield from repo.apply(
            row, NodeEvent.START_BURN_IN, reason="burn-in starts on registration", actor=actor, now_us=now
        )
    if then is not None:
        yield from then()
    return (yield from repo.get_view(inventory.node_id))


def _registered(inventory: Inventory) -> Tx[NodeView | None]:
    """The node if it is registered with exactly this inventory; None if neither it nor any of
    its GPUs is registered. ALREADY_EXISTS when a GPU belongs to another node or the node has
    another inventory.

    The GPUs are read before the node: on PostgreSQL each statement sees what was committed
    when it began, and a node commits with its GPUs, so a registration that commits between the
    two reads shows as the node, never as its GPUs without it."""
    owners = yield from repo.gpu_owners([g.uuid for g in inventory.gpus])
    for i, gpu in enumerate(inventory.gpus):
        owner = owners.get(gpu.uuid)
        if owner is not None and owner != inventory.node_id:
            raise AlreadyExists(
                reason="GPU_ALREADY_REGISTERED",
                message=f"GPU {gpu.uuid!r} belongs to node {owner!r}",
                metadata={"field": f"gpus[{i}].uuid", "node_id": owner},
            )
    existing = yield from repo.find(inventory.node_id)
    if existing is None:
        return None
    view = (yield from repo.views([existing]))[0]
    differences = _inventory_differences(view, inventory)
    if not differences:
        return view
    raise AlreadyExists(
        reason="NODE_INVENTORY_MISMATCH",
        message=f"node {inventory.node_id!r} is registered with another {', '.join(differences)}",
        # The first field that differs; "differs" lists them all.
        metadata={"node_id": inventory.node_id, "field": differences[0], "differs": ",".join(differences)},
    )


async def transition(store: Database, principal: Principal, node_id: str, event: NodeEvent, reason: str) -> NodeView:
    """Apply one lifecycle event chosen by an operator or agent."""
    check_speaks_for(principal, node_id)
    locking = store.dialect == "postgresql"
    return await store.transact(partial(_transition, node_id, event, reason, actor=principal.actor, locking=locking))


def _flags_for(row: Node, event: NodeEvent, reason: str) -> Node:
    """``row`` with the cordon, drain and status reason ``event`` sets: a drain cordons the node
    (and, while it is held, leaves service once released); a return to service clears them."""
    if event is NodeEvent.DRAIN:
        pending = row.drain_pending or NodeState(row.state) in HELD_STATES
        return replace(row, status_reason=reason or "drained", cordoned=True, drain_pending=pending)
    if event is NodeEvent.RETURN_TO_SERVICE:
        return replace(row, drain_pending=False, cordoned=False, status_reason="")
    return row


def drain(row: Node, reason: str, *, actor: str) -> Tx[Node]:
    """DRAIN ``row`` as DrainNode does (cordoned; drain pending while a tenant holds it), as a
    step of the caller's transaction; the node as written."""
    return (
        yield from repo.apply(
            _flags_for(row, NodeEvent.DRAIN, reason), NodeEvent.DRAIN, reason=reason, actor=actor, now_us=now_us()
        )
    )


def _transition(node_id: str, event: NodeEvent, reason: str, *, actor: str, locking: bool) -> Tx[NodeView]:
    row = yield from repo.get_row(node_id, locking=locking)
    yield from repo.apply(_flags_for(row, event, reason), event, reason=reason, actor=actor, now_us=now_us())
    return (yield from repo.get_view(node_id))


async def complete_burn_in(
    store: Database, principal: Principal, node_id: str, *, passed: bool, detail: str
) -> NodeView:
    """Record a burn-in result: BURN_IN to READY if passed, else QUARANTINED (FAILED_PRECONDITION from other states)."""
    event = NodeEvent.PASS_BURN_IN if passed else NodeEvent.FAIL_BURN_IN
    return await transition(
        store, principal, node_id, event, detail or ("burn-in passed" if passed else "burn-in failed")
    )


async def set_cordon(store: Database, principal: Principal, node_id: str, *, cordoned: bool, reason: str) -> NodeView:
    """Cordon flags a node unplaceable without moving it through the state table.

    FAILED_PRECONDITION, changing nothing, while a drain is pending (DRAIN_PENDING: the drain
    holds the cordon and its reason until the node leaves service) and on a RETIRED node
    (NODE_RETIRED: it never serves again).
    """
    locking = store.dialect == "postgresql"
    cordon = partial(_set_cordon, node_id, cordoned=cordoned, reason=reason, actor=principal.actor, locking=locking)
    return await store.transact(cordon)


def _set_cordon(node_id: str, *, cordoned: bool, reason: str, actor: str, locking: bool) -> Tx[NodeView]:
    row = yield from repo.get_row(node_id, locking=locking)
    if row.drain_pending:
        raise FailedPrecondition(
            reason="DRAIN_PENDING",
            message=(
                f"node {node_id!r} is draining: the drain keeps it cordoned until it leaves service"
                " (QUARANTINED) once its tenant releases it; change the cordon after that"
            ),
            metadata={"node_id": node_id, "field": "node_id"},
        )
    if row.state == NodeState.RETIRED:
        raise FailedPrecondition(
            reason="NODE_RETIRED",
            message=f"node {node_id!r} is retired for good; it cannot be cordoned or uncordoned",
            metadata={"node_id": node_id, "field": "node_id"},
        )
    status_reason = (reason or "cordoned") if cordoned else ""
    if (row.cordoned, row.status_reason) != (cordoned, status_reason):
        # Only a change is history: cordoning a cordoned node again with its reason is a no-op.
        row = replace(row, cordoned=cordoned, status_reason=status_reason)
        yield from repo.save(row)
        event, event_reason = (NodeEvent.CORDON, status_reason) if cordoned else (NodeEvent.UNCORDON, "uncordoned")
        yield from repo.record_event(row, event, reason=event_reason, actor=actor, now_us=now_us())
    return (yield from repo.get_view(node_id))

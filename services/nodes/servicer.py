"""NodeService: protobuf in, domain calls, protobuf out. No rules live here."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import grpc
import structlog

from gpucloud.v1 import agent_pb2, node_pb2, node_pb2_grpc
from services.allocations import capacity, relocation, spares
from services.allocations.defrag import Move
from services.allocations.proto import (
    defrag_plan_to_proto,
    move_from_proto,
    move_to_proto,
    pool_capacity_to_proto,
    spare_pool_to_proto,
)
from services.auth.principal import current_principal
from services.fabric.commands import audit_isolation
from services.fabric.proto import audit_to_proto
from services.health import commands as health_commands
from services.health import repository as health_repo
from services.health.controller import ACTOR as HEALTH_ACTOR
from services.health.proto import automation_to_proto
from services.nodes import commands
from services.nodes import repository as repo
from services.nodes.inventory import GpuSpec, Inventory, canonical_gpu_uuid, check_gpus
from services.nodes.proto import GPU_MODEL_FROM_PROTO, NODE_STATE_FROM_PROTO, node_event_to_proto, node_to_proto
from services.nodes.repository import NodeFilter
from services.nodes.transitions import NodeEvent
from services.paging import Cursor, PageTokens, cut_page
from services.store.engine import Database
from services.validation import Violations

log = structlog.get_logger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
_KNOWN_MODELS = frozenset(GPU_MODEL_FROM_PROTO)
_KNOWN_STATES = frozenset(NODE_STATE_FROM_PROTO)
# A pool's spares: more than any fleet has nodes is a typo.
MAX_SPARES = 100_000
# PlanDefragmentation: at most this many switches to free, or nodes of an allocation to move.
MAX_DEFRAG = 10_000
# Allocations of at most this many nodes are moved when the request leaves it 0.
DEFAULT_MOVABLE_NODES = 4


def _node_id_and_reason(request: Any) -> tuple[str, str]:
    v = Violations()
    v.identifier("node_id", request.node_id)
    v.text("reason", getattr(request, "reason", ""))
    v.raise_if_any()
    return request.node_id, getattr(request, "reason", "")


def _checked_moves(moves: Sequence[node_pb2.DefragmentationMove]) -> list[Move]:
    """The moves an ApplyDefragmentation names, once well formed: 1 to ``MAX_MOVES``, ids well
    formed, and no node named twice (a node leaves or receives one allocation's work once)."""
    v = Violations()
    if not 1 <= len(moves) <= relocation.MAX_MOVES:
        v.add("moves", f"must hold 1 to {relocation.MAX_MOVES:,} moves, not {len(moves):,}")
        v.raise_if_any()
    named: set[str] = set()
    for i, move in enumerate(moves):
        v.identifier(f"moves[{i}].allocation_id", move.allocation_id)
        for name in ("from_node_id", "to_node_id"):
            node_id = getattr(move, name)
            v.identifier(f"moves[{i}].{name}", node_id)
            if node_id and node_id in named:
                itself = name == "to_node_id" and node_id == move.from_node_id
                whose = "the node it moves from" if itself else "named by an earlier move"
                v.add(f"moves[{i}].{name}", f"{node_id} is {whose}: each node moves once")
            named.add(node_id)
    v.raise_if_any()
    return [move_from_proto(m) for m in moves]


def checked_inventory(
    request: node_pb2.RegisterNodeRequest | agent_pb2.RegisterAgentRequest, v: Violations | None = None
) -> Inventory:
    """The inventory a registration names, once every field is well formed; INVALID_ARGUMENT
    naming each bad field otherwise (together with any already in ``v``)."""
    v = v or Violations()
    v.identifier("node_id", request.node_id)
    v.enum("gpu_model", request.gpu_model, _KNOWN_MODELS)
    for name in ("zone", "rack", "leaf_switch"):
        v.identifier(name, getattr(request, name))
    gpus = tuple(GpuSpec(canonical_gpu_uuid(g.uuid), g.index) for g in request.gpus)
    check_gpus(v, gpus)
    v.raise_if_any()
    return Inventory(
        node_id=request.node_id,
        gpu_model=GPU_MODEL_FROM_PROTO[request.gpu_model],
        gpus=gpus,
        zone=request.zone,
        rack=request.rack,
        leaf_switch=request.leaf_switch,
    )


class NodeServicer(node_pb2_grpc.NodeServiceServicer):
    """NodeService: checks each request, then calls ``commands`` or reads the repository."""

    def __init__(self, store: Database, page_tokens: PageTokens) -> None:
        self._store = store
        self._tokens = page_tokens

    async def RegisterNode(
        self, request: node_pb2.RegisterNodeRequest, context: Context
    ) -> node_pb2.RegisterNodeResponse:
        """Register a node after checking its inventory, and start its burn-in; an agent registers only its own."""
        view = await commands.register(self._store, current_principal(), checked_inventory(request))
        return node_pb2.RegisterNodeResponse(node=node_to_proto(view))

    async def GetNode(self, request: node_pb2.GetNodeRequest, context: Context) -> node_pb2.GetNodeResponse:
        """Read one node; an agent may read only its own (PERMISSION_DENIED otherwise)."""
        node_id, _ = _node_id_and_reason(request)
        commands.check_speaks_for(current_principal(), node_id)
        view = await self._store.query(repo.get_view(node_id))
        return node_pb2.GetNodeResponse(node=node_to_proto(view))

    async def ListNodes(self, request: node_pb2.ListNodesRequest, context: Context) -> node_pb2.ListNodesResponse:
        """List nodes by id, filtered by state, GPU model and zone."""
        v = Violations()
        size = v.page_size("page_size", request.page_size)
        v.enum("state", request.state, _KNOWN_STATES, required=False)
        v.enum("gpu_model", request.gpu_model, _KNOWN_MODELS, required=False)
        v.identifier("zone", request.zone, required=False)
        scope: dict[str, str | int] = {
            "list": "nodes",
            "state": request.state,
            "gpu_model": request.gpu_model,
            "zone": request.zone,
        }
        cursor = v.page_token(self._tokens, request.page_token, scope)
        v.raise_if_any()
        flt = NodeFilter(
            state=NODE_STATE_FROM_PROTO.get(request.state),
            gpu_model=GPU_MODEL_FROM_PROTO.get(request.gpu_model),
            zone=request.zone,
        )
        page = await self._store.query(
            repo.list_views(flt, after_id=cursor.last_id if cursor else None, limit=size + 1)
        )
        page, after = cut_page(page, size, lambda view: Cursor(0, view.row.node_id))
        return node_pb2.ListNodesResponse(
            nodes=[node_to_proto(n) for n in page], next_page_token=self._tokens.next_token(after, scope)
        )

    async def _transition(self, request: Any, event: NodeEvent) -> node_pb2.Node:
        node_id, reason = _node_id_and_reason(request)
        view = await commands.transition(self._store, current_principal(), node_id, event, reason)
        return node_to_proto(view)

    async def CompleteBurnIn(
        self, request: node_pb2.CompleteBurnInRequest, context: Context
    ) -> node_pb2.CompleteBurnInResponse:
        """Record a node's burn-in result; an agent only for its own node."""
        v = Violations()
        v.identifier("node_id", request.node_id)
        v.text("detail", request.detail)
        v.raise_if_any()
        view = await commands.complete_burn_in(
            self._store, current_principal(), request.node_id, passed=request.passed, detail=request.detail
        )
        return node_pb2.CompleteBurnInResponse(node=node_to_proto(view))

    async def CordonNode(self, request: node_pb2.CordonNodeRequest, context: Context) -> node_pb2.CordonNodeResponse:
        """Stop placements on a node, keeping its state; ``reason`` becomes its status reason."""
        node_id, reason = _node_id_and_reason(request)
        view = await commands.set_cordon(self._store, current_principal(), node_id, cordoned=True, reason=reason)
        return node_pb2.CordonNodeResponse(node=node_to_proto(view))

    async def UncordonNode(
        self, request: node_pb2.UncordonNodeRequest, context: Context
    ) -> node_pb2.UncordonNodeResponse:
        """Let placement use a node again, clearing its status reason."""
        node_id, _ = _node_id_and_reason(request)
        view = await commands.set_cordon(self._store, current_principal(), node_id, cordoned=False, reason="")
        return node_pb2.UncordonNodeResponse(node=node_to_proto(view))

    async def DrainNode(self, request: node_pb2.DrainNodeRequest, context: Context) -> node_pb2.DrainNodeResponse:
        """Cordon a node and take it out of service, at once if free or after its tenant releases it."""
        return node_pb2.DrainNodeResponse(node=await self._transition(request, NodeEvent.DRAIN))

    async def StartRepair(self, request: node_pb2.StartRepairRequest, context: Context) -> node_pb2.StartRepairResponse:
        """Move a QUARANTINED node to REPAIR."""
        return node_pb2.StartRepairResponse(node=await self._transition(request, NodeEvent.START_REPAIR))

    async def ReturnToService(
        self, request: node_pb2.ReturnToServiceRequest, context: Context
    ) -> node_pb2.ReturnToServiceResponse:
        """Send a QUARANTINED or REPAIR node back to burn-in, uncordoned."""
        return node_pb2.ReturnToServiceResponse(node=await self._transition(request, NodeEvent.RETURN_TO_SERVICE))

    async def RetireNode(self, request: node_pb2.RetireNodeRequest, context: Context) -> node_pb2.RetireNodeResponse:
        """Retire a REGISTERED, QUARANTINED or REPAIR node for good."""
        return node_pb2.RetireNodeResponse(node=await self._transition(request, NodeEvent.RETIRE))

    async def SetHealthAutomation(
        self, request: node_pb2.SetHealthAutomationRequest, context: Context
    ) -> node_pb2.SetHealthAutomationResponse:
        """Pause or resume the health controller's removals in one pool."""
        v = Violations()
        v.enum("gpu_model", request.gpu_model, _KNOWN_MODELS)
        v.text("reason", request.reason)
        v.raise_if_any()
        model = GPU_MODEL_FROM_PROTO[request.gpu_model]
        automation = await health_commands.set_automation(
            self._store, current_principal(), model, paused=request.paused, reason=request.reason
        )
        return node_pb2.SetHealthAutomationResponse(automation=automation_to_proto(automation))

    async def GetHealthAutomation(
        self, request: node_pb2.GetHealthAutomationRequest, context: Context
    ) -> node_pb2.GetHealthAutomationResponse:
        """Every pool's setting, by GPU model."""
        pools = await health_commands.automations(self._store)
        return node_pb2.GetHealthAutomationResponse(pools=[automation_to_proto(pool) for pool in pools])

    async def SetSparePool(
        self, request: node_pb2.SetSparePoolRequest, context: Context
    ) -> node_pb2.SetSparePoolResponse:
        """Set how many free nodes of one pool creates must leave for replacements."""
        v = Violations()
        v.enum("gpu_model", request.gpu_model, _KNOWN_MODELS)
        if not 0 <= request.spares <= MAX_SPARES:
            v.add("spares", f"must be 0 to {MAX_SPARES:,}, not {request.spares}")
        v.raise_if_any()
        pool = await spares.set_spares(
            self._store, current_principal(), GPU_MODEL_FROM_PROTO[request.gpu_model], request.spares
        )
        return node_pb2.SetSparePoolResponse(pool=spare_pool_to_proto(pool))

    async def ListSparePools(
        self, request: node_pb2.ListSparePoolsRequest, context: Context
    ) -> node_pb2.ListSparePoolsResponse:
        """Every pool's spares and free nodes, by GPU model."""
        return node_pb2.ListSparePoolsResponse(
            pools=[spare_pool_to_proto(pool) for pool in await spares.pools(self._store)]
        )

    async def GetFragmentation(
        self, request: node_pb2.GetFragmentationRequest, context: Context
    ) -> node_pb2.GetFragmentationResponse:
        """Each pool's free capacity and how it lies across leaf switches."""
        found = await self._store.query(capacity.pools())
        return node_pb2.GetFragmentationResponse(pools=[pool_capacity_to_proto(pool) for pool in found])

    async def PlanDefragmentation(
        self, request: node_pb2.PlanDefragmentationRequest, context: Context
    ) -> node_pb2.PlanDefragmentationResponse:
        """The fewest moves of small allocations that free whole leaf switches; moves nothing."""
        v = Violations()
        v.enum("gpu_model", request.gpu_model, _KNOWN_MODELS)
        for name in ("blocks", "max_allocation_nodes"):
            value = getattr(request, name)
            if not 0 <= value <= MAX_DEFRAG:
                v.add(name, f"must be 0 to {MAX_DEFRAG:,}, not {value}")
        v.raise_if_any()
        made, held = await self._store.query(
            capacity.defragmentation(
                GPU_MODEL_FROM_PROTO[request.gpu_model],
                blocks=request.blocks or 1,
                max_allocation_nodes=request.max_allocation_nodes or DEFAULT_MOVABLE_NODES,
            )
        )
        return defrag_plan_to_proto(made, held)

    async def ApplyDefragmentation(
        self, request: node_pb2.ApplyDefragmentationRequest, context: Context
    ) -> node_pb2.ApplyDefragmentationResponse:
        """Make the moves of a plan on an operator's go: all of them, checked again, or none."""
        moves = _checked_moves(request.moves)
        principal = current_principal()
        locking = self._store.dialect == "postgresql"
        done = await self._store.transact(partial(relocation.apply, moves, actor=principal.actor, locking=locking))
        log.info("defragmentation_applied", actor=principal.actor, moves=len(done.moves), made=done.made)
        return node_pb2.ApplyDefragmentationResponse(moves=[move_to_proto(m) for m in done.moves], made=done.made)

    async def ListHealthEvents(
        self, request: node_pb2.ListHealthEventsRequest, context: Context
    ) -> node_pb2.ListHealthEventsResponse:
        """List the health controller's decisions across the fleet, oldest first."""
        v = Violations()
        since_us = None
        if request.HasField("since"):
            since_us = v.timestamp_us("since", request.since.seconds, request.since.nanos)
        size = v.page_size("page_size", request.page_size)
        scope: dict[str, str | int] = {"list": "health_events", "since": -1 if since_us is None else since_us}
        cursor = v.page_token(self._tokens, request.page_token, scope)
        v.raise_if_any()
        after_seq = cursor.created_us if cursor else None  # the event's sequence number, as for ListNodeEvents
        rows = await self._store.query(
            health_repo.decisions(since_us=since_us, after_seq=after_seq, limit=size + 1, actor=HEALTH_ACTOR)
        )
        rows, after = cut_page(rows, size, lambda row: Cursor(row.event_seq, ""))
        return node_pb2.ListHealthEventsResponse(
            next_page_token=self._tokens.next_token(after, scope),
            events=[node_event_to_proto(r) for r in rows],
        )

    async def AuditIsolation(
        self, request: node_pb2.AuditIsolationRequest, context: Context
    ) -> node_pb2.AuditIsolationResponse:
        """Check every node's reported fabric partitions against whom it belongs to."""
        checked, violations = await audit_isolation(self._store)
        return audit_to_proto(checked, violations)

    async def ListNodeEvents(
        self, request: node_pb2.ListNodeEventsRequest, context: Context
    ) -> node_pb2.ListNodeEventsResponse:
        """List a node's state changes, oldest first; NOT_FOUND for an unknown node."""
        v = Violations()
        v.identifier("node_id", request.node_id)
        size = v.page_size("page_size", request.page_size)
        scope: dict[str, str | int] = {"list": "node_events", "node_id": request.node_id}
        cursor = v.page_token(self._tokens, request.page_token, scope)
        v.raise_if_any()
        # The keyset is the event's sequence number, carried in the cursor's integer slot.
        after_seq = cursor.created_us if cursor else None
        rows = await self._store.query(repo.events(request.node_id, after_seq=after_seq, limit=size + 1))
        rows, after = cut_page(rows, size, lambda row: Cursor(row.event_seq, ""))
        return node_pb2.ListNodeEventsResponse(
            next_page_token=self._tokens.next_token(after, scope),
            events=[node_event_to_proto(r) for r in rows],
        )

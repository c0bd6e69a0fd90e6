"""Carrying out a defragmentation plan's moves on an operator's go (ApplyDefragmentation).

The operator saw a plan (defrag.py) and sends back the moves to make. The fleet may have
changed in between, so each move is checked again inside the transaction that makes it:

- the allocation is ACTIVE, holds whole nodes, and still holds ``from_node_id``;
- ``to_node_id`` is READY and placeable, of the allocation's GPU model, and never held by the
  allocation before (its usage events there are written once);
- a ``same_block`` allocation still has all its nodes under one leaf switch once moved.

All the moves or none: the first that fails refuses the call, naming the move's field, and the
operator plans again. A move already made (a retry of a call that made it) changes nothing and
is answered as made, so a call whose reply was lost can be sent again.

Each move is replacement.move: billing passes from one node to the other at one instant, the
node left goes to its scrub (by its agent, or counted done by the releaser for a node no agent
runs) and then back to READY, and the allocation's replacements say what moved it and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.allocations import replacement
from services.allocations import repository as repo
from services.allocations.defrag import Move
from services.allocations.repository import Allocation
from services.allocations.states import AllocationState
from services.errors import FailedPrecondition, NotFound
from services.nodes import repository as nodes_repo
from services.nodes.repository import Node
from services.nodes.transitions import NodeState
from services.store.tx import Tx

# Moves one go makes at most, in one transaction (about a dozen statements a move; on SQLite
# they run on the event loop). PlanDefragmentation proposes no more, so a plan is always a go.
MAX_MOVES = 256


@dataclass(frozen=True, slots=True)
class Relocated:
    """What a go carried out: every move asked, with its allocation's tenant, and how many of
    them this call made (the rest an earlier call had)."""

    moves: list[Move]
    made: int


def apply(moves: Sequence[Move], *, actor: str, locking: bool) -> Tx[Relocated]:
    """Make ``moves`` (distinct nodes, checked by the caller) in the caller's transaction, or
    none: NOT_FOUND or FAILED_PRECONDITION naming the first move that no longer holds.

    On PostgreSQL the allocations are locked first, then their nodes, then the nodes moved to:
    the order a cancel and a replacement lock in."""
    ids = sorted({m.allocation_id for m in moves})
    rows = {row.allocation_id: row for row in (yield from repo.get_rows(ids, locking=locking))}
    for i, move in enumerate(moves):
        if move.allocation_id not in rows:
            raise NotFound.of("allocation", move.allocation_id, field_path=f"moves[{i}].allocation_id")
    # On SQLite the writer's one lock holds them all; on PostgreSQL a target not locked here was
    # not free when asked (it may be by the time it is read: it is not used unlocked).
    targets = [m.to_node_id for m in moves]
    locked = set(targets)
    if locking:
        yield from repo.held_nodes(ids, locking=True)
        locked = yield from nodes_repo.lock_free(sorted(targets), skip_locked=False)
    done = yield from repo.replacements(ids)
    to_make: list[tuple[int, Move, Node, repo.Holding]] = []
    answered = []
    for i, move in enumerate(moves):
        row = rows[move.allocation_id]
        answered.append(Move(move.allocation_id, row.tenant_id, move.from_node_id, move.to_node_id))
        if any(
            (r.removed_node_id, r.spare_node_id) == (move.from_node_id, move.to_node_id)
            for r in done.get(row.allocation_id, ())
        ):
            continue
        node, held = yield from _check(i, move, row, locked)
        to_make.append((i, move, node, held))
    yield from _check_blocks(rows, to_make)
    for _, move, node, held in to_make:
        reason = f"defragmentation: moved to {move.to_node_id} to free leaf switch {node.leaf_switch}"
        yield from replacement.move(node, held, move.to_node_id, reason, actor=actor)
    return Relocated(answered, len(to_make))


def _check(i: int, move: Move, row: Allocation, locked: set[str]) -> Tx[tuple[Node, repo.Holding]]:
    """The move's node and holding when the move can be made now; else why not, naming its field."""
    at = f"moves[{i}]"
    if row.state != AllocationState.ACTIVE.value:
        raise _stale(f"{at}.allocation_id", f"allocation {row.allocation_id} is {row.state}: only an active one moves")
    if row.node_count == 0:
        raise _stale(
            f"{at}.allocation_id", f"allocation {row.allocation_id} holds part of a node: only whole nodes move"
        )
    held = yield from repo.holding(move.from_node_id)
    if held is None or held.allocation.allocation_id != row.allocation_id:
        raise _stale(f"{at}.from_node_id", f"allocation {row.allocation_id} no longer holds {move.from_node_id}")
    node = yield from nodes_repo.get_row(move.from_node_id)
    target = yield from nodes_repo.find(move.to_node_id)
    if target is None:
        raise NotFound.of("node", move.to_node_id, field_path=f"{at}.to_node_id")
    if target.gpu_model != row.gpu_model:
        raise _stale(
            f"{at}.to_node_id",
            f"{target.node_id} is an {target.gpu_model} node; {row.allocation_id} runs on {row.gpu_model}",
        )
    if target.node_id not in locked or target.state != NodeState.READY.value or target.cordoned or target.unreachable:
        raise _stale(f"{at}.to_node_id", f"{target.node_id} is no longer free ({_condition(target)})")
    if target.node_id in (yield from repo.ever_assigned(row.allocation_id)):
        raise _stale(
            f"{at}.to_node_id", f"allocation {row.allocation_id} held {target.node_id} before: it cannot move back"
        )
    return node, held


def _check_blocks(rows: dict[str, Allocation], to_make: list[tuple[int, Move, Node, repo.Holding]]) -> Tx[None]:
    """Refuse moves that would leave a ``same_block`` allocation's nodes under two leaf switches,
    naming the allocation's first move."""
    first: dict[str, int] = {}
    for i, move, _, _ in to_make:
        if rows[move.allocation_id].same_block:
            first.setdefault(move.allocation_id, i)
    for allocation_id, i in first.items():
        view = (yield from repo.views([rows[allocation_id]]))[0]
        moved = {m.from_node_id: m.to_node_id for _, m, _, _ in to_make if m.allocation_id == allocation_id}
        leaves: set[str] = set()
        for node_id in view.node_ids:
            leaves.add((yield from nodes_repo.get_row(moved.get(node_id, node_id))).leaf_switch)
        if len(leaves) > 1:
            raise FailedPrecondition(
                reason="SAME_BLOCK_SPLIT",
                message=f"allocation {allocation_id} asked for one leaf switch (same_block); the moves would"
                f" spread it over {', '.join(sorted(leaves))}",
                metadata={"allocation_id": allocation_id, "field": f"moves[{i}].to_node_id"},
            )


def _condition(node: Node) -> str:
    if node.state != NodeState.READY.value:
        return node.state
    return "cordoned" if node.cordoned else "unreachable"


def _stale(field_path: str, message: str) -> FailedPrecondition:
    return FailedPrecondition(
        reason="MOVE_NO_LONGER_POSSIBLE",
        message=f"{field_path}: {message}; nothing moved: plan again",
        metadata={"field": field_path},
    )

"""A pool's fragmentation, and the fewest moves that free whole leaf switches. No I/O.

Allocations are whole nodes, so a node is free whole or not at all, and what fragments a pool
is how its free nodes lie across leaf switches: a ``same_block`` gang needs one switch with
enough free. ``plan`` frees whole switches by moving small allocations' nodes (those of
allocations of at most ``max_allocation_nodes``) to free nodes elsewhere:

- A switch can be freed only if every node of it in service is free or held by a movable
  allocation (a node burning in, scrubbing or quarantined stays where it is, and so does a
  ``same_block`` allocation: moving it whole would take the free switch this plan makes). A
  held node that is cordoned or drained would not be free once left, so its switch stays.
- Its cost is the nodes to move; the cheapest switches are freed first, each move counted once.
- Moves go to free nodes in switches that are partly held, fullest first, never into a switch
  that is wholly free already or one being freed: a plan that freed one switch by breaking
  another up would gain nothing. A switch whose other nodes are scrubbing on their way back to
  READY (the nodes an earlier go moved off) counts as wholly free, or the next plan would undo
  the last. Never to a node the allocation held before: its usage events there are written
  once (services/usage/repository.py).
- At most ``max_moves`` moves: what one go may make, and no more free nodes than the pool
  keeps beyond its spares (each move holds a free node until the node left is scrubbed).

A plan moves nothing: an operator decides, since every move checkpoints and restarts work, and
relocation.py then carries out the moves the operator saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class NodeSlot:
    """A node in service, in fabric order: its leaf switch, whether it is free (READY and
    placeable), the allocation holding it ("" for none), and whether it is scrubbing on its way
    back to READY (``freeing``) or would stay out of the pool once left (``stuck``)."""

    node_id: str
    leaf_switch: str
    free: bool
    allocation_id: str = ""
    freeing: bool = False
    # Cordoned or drained: out of the pool once its allocation leaves it.
    stuck: bool = False


@dataclass(frozen=True, slots=True)
class Held:
    """An allocation holding nodes: its tenant and size, whether its nodes must share a leaf
    switch, and every node it has held (none of which it may move to)."""

    tenant_id: str
    node_count: int
    same_block: bool = False
    held_before: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Move:
    """One node of an allocation moved to another."""

    allocation_id: str
    tenant_id: str
    from_node_id: str
    to_node_id: str


@dataclass(frozen=True, slots=True)
class DefragPlan:
    """The switches freed, cheapest first, and the moves that free them; ``summary`` says it in
    a sentence, or why there is no plan."""

    freed: list[str] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    summary: str = ""

    def costs(self, held: dict[str, Held]) -> list[tuple[str, str, int, int]]:
        """Per allocation touched, in the order first moved: (id, tenant, nodes moved, node count)."""
        moved: dict[str, int] = {}
        for move in self.moves:
            moved[move.allocation_id] = moved.get(move.allocation_id, 0) + 1
        return [(a, held[a].tenant_id, n, held[a].node_count) for a, n in moved.items()]


def plan(
    slots: Sequence[NodeSlot], held: dict[str, Held], *, blocks: int, max_allocation_nodes: int, max_moves: int
) -> DefragPlan:
    """The fewest moves, ``max_moves`` at most, that free ``blocks`` leaf switches whole (fewer
    if no more can be)."""
    switches: dict[str, list[NodeSlot]] = {}
    for slot in slots:
        switches.setdefault(slot.leaf_switch, []).append(slot)

    def movable(slot: NodeSlot) -> bool:
        if slot.free:
            return True
        if slot.stuck:
            return False
        holder = held.get(slot.allocation_id)
        return holder is not None and holder.node_count <= max_allocation_nodes and not holder.same_block

    wholly_free = {leaf for leaf, members in switches.items() if all(s.free or s.freeing for s in members)}
    candidates = sorted(
        (
            (sum(not s.free for s in members), leaf)
            for leaf, members in switches.items()
            if leaf not in wholly_free and all(movable(s) for s in members)
        ),
    )
    freed: list[str] = []
    moves: list[Move] = []
    receiving: set[str] = set()  # switches moves go into: they can no longer be freed
    leaf_of = {slot.node_id: slot.leaf_switch for slot in slots}
    capped = False
    for cost, leaf in candidates:
        if len(freed) == blocks:
            break
        if leaf in receiving:
            continue
        if len(moves) + cost > max_moves:
            capped = True
            continue
        targets = _destinations(switches, excluded={*wholly_free, *freed, leaf}, taken={m.to_node_id for m in moves})
        if len(targets) < cost:
            continue
        matched = _match([s for s in switches[leaf] if not s.free], targets, held)
        if matched is None:
            continue
        moves.extend(matched)
        receiving.update(leaf_of[m.to_node_id] for m in matched)
        freed.append(leaf)
    freeing = {leaf for leaf in wholly_free if not all(s.free for s in switches[leaf])}
    summary = _summary(freed, moves, blocks, switches, wholly_free, freeing)
    if capped:
        summary += f"; at most {max_moves} move(s) now (a go's limit, or the free nodes beyond the pool's spares)"
    return DefragPlan(freed, moves, summary)


def _destinations(switches: dict[str, list[NodeSlot]], *, excluded: set[str], taken: set[str]) -> list[str]:
    """Free nodes outside ``excluded`` switches and not ``taken``, fullest switch first."""
    open_switches = sorted(
        ((sum(s.free and s.node_id not in taken for s in members), leaf) for leaf, members in switches.items()),
    )
    return [
        s.node_id
        for _, leaf in open_switches
        if leaf not in excluded
        for s in switches[leaf]
        if s.free and s.node_id not in taken
    ]


def _match(leaving: list[NodeSlot], targets: list[str], held: dict[str, Held]) -> list[Move] | None:
    """Each node of ``leaving`` to one of ``targets`` its allocation never held, the nodes with
    the fewest such targets choosing first, each the first still unused; None when one is left
    without. Greedy, and exact in the case that happens: one allocation moved off nodes before
    (by an earlier go or a replacement) and the rest free to go anywhere."""
    options = {s.node_id: [t for t in targets if t not in held[s.allocation_id].held_before] for s in leaving}
    unused = set(targets)
    chosen: dict[str, str] = {}
    for slot in sorted(leaving, key=lambda s: len(options[s.node_id])):
        target = next((t for t in options[slot.node_id] if t in unused), None)
        if target is None:
            return None
        unused.discard(target)
        chosen[slot.node_id] = target
    return [Move(s.allocation_id, held[s.allocation_id].tenant_id, s.node_id, chosen[s.node_id]) for s in leaving]


def _summary(
    freed: list[str],
    moves: list[Move],
    blocks: int,
    switches: dict[str, list[NodeSlot]],
    wholly_free: set[str],
    freeing: set[str],
) -> str:
    if not switches:
        return "the pool has no node in service: nothing to free"
    already = f"{len(wholly_free)} leaf switch(es) already wholly free"
    if freeing:
        already += f" ({', '.join(sorted(freeing))} once its nodes finish their scrub)"
    if not freed:
        return f"no leaf switch can be freed by moving small allocations to free nodes elsewhere; {already}"
    touched = len({m.allocation_id for m in moves})
    nodes = sum(len(switches[leaf]) for leaf in freed)
    short = f" (only {len(freed)} of the {blocks} asked can be)" if len(freed) < blocks else ""
    return (
        f"moving {len(moves)} node(s) of {touched} allocation(s) frees {', '.join(freed)} whole"
        f" ({nodes} node(s)){short}; {already}"
    )

"""The defragmentation plan (services/allocations/defrag.py): the fewest moves of small
allocations that free whole leaf switches, never into a switch wholly free or being freed."""

from __future__ import annotations

from services.allocations.defrag import Held, NodeSlot, plan


def fleet(layout: dict[str, str]) -> list[NodeSlot]:
    """Switches as strings, one character a node: '.' free, a letter the allocation holding it,
    '#' a node neither free nor movable (scrubbing, say)."""
    slots = []
    for leaf, nodes in layout.items():
        for i, mark in enumerate(nodes):
            node_id = f"{leaf}-n{i}"
            if mark == ".":
                slots.append(NodeSlot(node_id, leaf, True))
            elif mark == "#":
                slots.append(NodeSlot(node_id, leaf, False))
            else:
                slots.append(NodeSlot(node_id, leaf, False, mark))
    return slots


def held(**sizes: int) -> dict[str, Held]:
    return {name: Held(f"tenant-{name}", size) for name, size in sizes.items()}


def test_the_cheapest_switch_is_freed_into_the_fullest_other() -> None:
    slots = fleet({"s1": "a...", "s2": "bb..", "s3": "cc.c"})
    made = plan(slots, held(a=1, b=2, c=3), blocks=1, max_allocation_nodes=4)
    assert made.freed == ["s1"]
    # One move, into s3 (one node free: the fullest), not s2.
    assert [(m.allocation_id, m.from_node_id, m.to_node_id) for m in made.moves] == [("a", "s1-n0", "s3-n2")]
    assert made.costs(held(a=1, b=2, c=3)) == [("a", "tenant-a", 1, 1)]
    assert "frees s1 whole (4 node(s))" in made.summary


def test_large_allocations_and_unmovable_nodes_keep_their_switch() -> None:
    slots = fleet({"s1": "aa..", "s2": "#...", "s3": "c..."})
    made = plan(slots, held(a=6, c=1), blocks=1, max_allocation_nodes=4)
    # s1 holds a gang larger than the limit; s2 a node being scrubbed: only s3 can be freed.
    assert made.freed == ["s3"]
    assert [m.from_node_id for m in made.moves] == ["s3-n0"]
    assert made.moves[0].to_node_id.startswith("s1")


def test_nothing_moves_into_a_wholly_free_switch_or_one_being_freed() -> None:
    slots = fleet({"s1": "a...", "s2": "b...", "s3": "...."})
    made = plan(slots, held(a=1, b=1), blocks=2, max_allocation_nodes=4)
    # Freeing s1 moves a into s2; s2 then receives and cannot be freed; s3 is never a target.
    assert made.freed == ["s1"]
    assert [m.to_node_id[:2] for m in made.moves] == ["s2"]
    assert "only 1 of the 2 asked" in made.summary


def test_an_empty_pool_says_so() -> None:
    assert plan([], {}, blocks=1, max_allocation_nodes=4).summary == "the pool has no node in service: nothing to free"


def test_no_plan_when_no_switch_can_be_emptied() -> None:
    made = plan(fleet({"s1": "aaab", "s2": "bbb."}), held(a=3, b=4), blocks=1, max_allocation_nodes=4)
    assert (made.freed, made.moves) == ([], [])
    assert made.summary.startswith("no leaf switch can be freed")

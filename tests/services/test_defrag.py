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
    made = plan(slots, held(a=1, b=2, c=3), blocks=1, max_allocation_nodes=4, max_moves=100)
    assert made.freed == ["s1"]
    # One move, into s3 (one node free: the fullest), not s2.
    assert [(m.allocation_id, m.from_node_id, m.to_node_id) for m in made.moves] == [("a", "s1-n0", "s3-n2")]
    assert made.costs(held(a=1, b=2, c=3)) == [("a", "tenant-a", 1, 1)]
    assert "frees s1 whole (4 node(s))" in made.summary


def test_large_allocations_and_unmovable_nodes_keep_their_switch() -> None:
    slots = fleet({"s1": "aa..", "s2": "#...", "s3": "c..."})
    made = plan(slots, held(a=6, c=1), blocks=1, max_allocation_nodes=4, max_moves=100)
    # s1 holds a gang larger than the limit; s2 a node being scrubbed: only s3 can be freed.
    assert made.freed == ["s3"]
    assert [m.from_node_id for m in made.moves] == ["s3-n0"]
    assert made.moves[0].to_node_id.startswith("s1")


def test_nothing_moves_into_a_wholly_free_switch_or_one_being_freed() -> None:
    slots = fleet({"s1": "a...", "s2": "b...", "s3": "...."})
    made = plan(slots, held(a=1, b=1), blocks=2, max_allocation_nodes=4, max_moves=100)
    # Freeing s1 moves a into s2; s2 then receives and cannot be freed; s3 is never a target.
    assert made.freed == ["s1"]
    assert [m.to_node_id[:2] for m in made.moves] == ["s2"]
    assert "only 1 of the 2 asked" in made.summary


def test_an_empty_pool_says_so() -> None:
    assert (
        plan([], {}, blocks=1, max_allocation_nodes=4, max_moves=100).summary
        == "the pool has no node in service: nothing to free"
    )


def test_no_plan_when_no_switch_can_be_emptied() -> None:
    made = plan(fleet({"s1": "aaab", "s2": "bbb."}), held(a=3, b=4), blocks=1, max_allocation_nodes=4, max_moves=100)
    assert (made.freed, made.moves) == ([], [])
    assert made.summary.startswith("no leaf switch can be freed")


def test_a_same_block_allocation_keeps_its_switch() -> None:
    slots = fleet({"s1": "b...", "s2": "aa.."})
    # s1 is the cheaper switch, but b must keep its nodes under one switch: s2 is freed instead.
    sizes = {"a": Held("tenant-a", 2), "b": Held("tenant-b", 1, same_block=True)}
    made = plan(slots, sizes, blocks=1, max_allocation_nodes=4, max_moves=100)
    assert made.freed == ["s2"]
    assert [(m.allocation_id, m.to_node_id[:2]) for m in made.moves] == [("a", "s1"), ("a", "s1")]
    sizes["b"] = Held("tenant-b", 1)
    assert plan(slots, sizes, blocks=1, max_allocation_nodes=4, max_moves=100).freed == ["s1"]


def test_a_node_is_never_moved_to_one_its_allocation_held_before() -> None:
    slots = fleet({"s1": "a...", "s2": "bb.."})
    sizes = {"a": Held("tenant-a", 1, held_before=frozenset({"s2-n2"})), "b": Held("tenant-b", 2)}
    made = plan(slots, sizes, blocks=1, max_allocation_nodes=4, max_moves=100)
    assert [(m.from_node_id, m.to_node_id) for m in made.moves] == [("s1-n0", "s2-n3")]
    # With every free node of s2 held before, s1 cannot be freed: s2 is, into s1.
    sizes["a"] = Held("tenant-a", 1, held_before=frozenset({"s2-n2", "s2-n3"}))
    made = plan(slots, sizes, blocks=1, max_allocation_nodes=4, max_moves=100)
    assert made.freed == ["s2"]
    assert {m.allocation_id for m in made.moves} == {"b"}


def test_a_switch_whose_nodes_are_scrubbing_back_to_ready_receives_nothing() -> None:
    slots = [*fleet({"s1": "aa..", "s2": "...."}), NodeSlot("s2-n4", "s2", False, freeing=True)]
    made = plan(slots, held(a=1), blocks=1, max_allocation_nodes=4, max_moves=100)
    # s2 will be wholly free once its node is scrubbed: moving s1's work there would undo that.
    assert (made.freed, made.moves) == ([], [])
    assert "1 leaf switch(es) already wholly free (s2 once its nodes finish their scrub)" in made.summary


def test_a_held_node_cordoned_or_drained_keeps_its_switch() -> None:
    slots = [*fleet({"s1": "....", "s2": "bb.."}), NodeSlot("s1-n4", "s1", False, "a", stuck=True)]
    made = plan(slots, held(a=1, b=2), blocks=1, max_allocation_nodes=4, max_moves=100)
    # s1 is the cheaper, but its node would stay out of the pool once left: s2 is freed.
    assert made.freed == ["s2"]


def test_no_more_moves_than_a_go_may_make() -> None:
    slots = fleet({"s1": "a...", "s2": "b...", "s3": "cc..", "s4": "dd.."})
    sizes = held(a=1, b=1, c=2, d=2)
    assert plan(slots, sizes, blocks=2, max_allocation_nodes=4, max_moves=2).freed == ["s1", "s2"]
    capped = plan(slots, sizes, blocks=2, max_allocation_nodes=4, max_moves=1)
    assert (capped.freed, len(capped.moves)) == (["s1"], 1)
    assert "at most 1 move(s) now" in capped.summary
    assert plan(slots, sizes, blocks=1, max_allocation_nodes=4, max_moves=0).freed == []


def test_the_node_with_fewest_places_to_go_chooses_first() -> None:
    # b held s2-n3 before; taking the first free node in order, a would leave b nowhere to go.
    slots = fleet({"s1": "ab..", "s2": "cc.."})
    sizes = {"a": Held("tenant-a", 1), "b": Held("tenant-b", 1, held_before=frozenset({"s2-n3"})), "c": Held("t", 2)}
    made = plan(slots, sizes, blocks=1, max_allocation_nodes=4, max_moves=100)
    assert [(m.allocation_id, m.to_node_id) for m in made.moves] == [("a", "s2-n3"), ("b", "s2-n2")]

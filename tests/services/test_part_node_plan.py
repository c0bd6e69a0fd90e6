"""Part-node allocations in the queue's rule (services/allocations/part_node.py, queue.py):
packed onto shared nodes before a free node is opened, spares kept, the scheduling package's
tenant rules on shared GPUs, and the queue's order kept behind a blocked allocation."""

from __future__ import annotations

from services.allocations.part_node import LiveHold, SharedNodes, describe
from services.allocations.placement import Candidate, Pool
from services.allocations.queue import Plan, ReasonKind, plan
from services.allocations.quotas import Ledger, Quota
from services.allocations.repository import Allocation
from services.nodes.inventory import GpuModel
from tests.services.test_queue_plan import FIRST_FIT, waiting


def node(i: int) -> Candidate:
    return Candidate("zone-a", "rack-0", "leaf-0", f"node-{i:03d}")


def part(name: str, *, tenant: str = "acme", gpus: int = 0, mig: str = "", share: int = 0, cpu: int = 0) -> Allocation:
    return Allocation(
        name, tenant, "H100", 0, "PENDING", 0, gpus=gpus, mig_profile=mig, share_milli=share, cpu_milli=cpu
    )


def shared_with(holds: list[tuple[Allocation, int, int]]) -> SharedNodes:
    """Node 0 shared, with (allocation, GPU index, MIG start) live."""
    return SharedNodes(GpuModel.H100, [node(0)], [LiveHold(row, "node-000", gpu, start) for row, gpu, start in holds])


def run(queue: list[Allocation], free: int, shared: SharedNodes, *, keep: int = 0) -> Plan:
    pool = Pool(node(i) for i in range(1, free + 1))
    return plan(queue, pool, policy=FIRST_FIT, keep=keep, fleet_nodes=free + 1, fleet_block=free + 1, shared=shared)


def test_work_packs_onto_the_shared_node_before_a_free_node_is_opened() -> None:
    held = part("held", gpus=4)
    made = run(
        [part("a", gpus=2), part("b", gpus=2), part("c", gpus=1)], 2, shared_with([(held, g, -1) for g in range(4)])
    )
    placed = {p.row.allocation_id: (p.node_id, p.gpus, p.opened) for p in made.parts}
    assert placed == {
        "a": ("node-000", (4, 5), False),
        "b": ("node-000", (6, 7), False),
        "c": ("node-001", (0,), True),
    }
    assert not made.waiting


def test_a_free_node_is_not_opened_into_the_spares() -> None:
    full = [(part(f"h{g}", gpus=1), g, -1) for g in range(8)]
    made = run([part("a", gpus=1)], 1, shared_with(full), keep=1)
    assert made.parts == []
    [reason] = made.waiting["a"]
    assert reason.kind is ReasonKind.WAITING_FOR_CAPACITY
    assert reason.figures == {
        "free_gpus": 0,
        "shared_nodes": 1,
        "most_free_on_one": 0,
        "needed_gpus": 1,
        "free": 1,
        "spares": 1,
    }


def test_another_tenants_soft_share_keeps_its_gpu_and_a_mig_gpu_takes_no_share() -> None:
    theirs = part("theirs", tenant="bolt", share=250)
    sliced = part("sliced", tenant="acme", mig="1g.10gb")
    made = run(
        [part("mine", share=500), part("more-mig", mig="3g.40gb")], 0, shared_with([(theirs, 0, -1), (sliced, 1, 0)])
    )
    placed = {p.row.allocation_id: (p.gpus, p.milli, p.mig_start) for p in made.parts}
    # GPU 0 is bolt's shares, GPU 1 acme's MIG slices: the share goes to GPU 2; the slice joins
    # acme's other slice on GPU 1, at the 3g.40gb start its 1g.10gb at slice 0 leaves free.
    assert placed == {"mine": ((2,), 500, -1), "more-mig": ((1,), 500, 4)}


def test_behind_a_blocked_gang_nothing_is_placed_even_where_it_would_fit() -> None:
    made = run([waiting("gang", 3), part("small", gpus=1)], 2, shared_with([(part("held", gpus=1), 0, -1)]))
    assert made.admitted == []
    assert made.parts == []
    assert [r.kind for r in made.waiting["gang"]] == [ReasonKind.WAITING_FOR_CAPACITY]
    [behind] = made.waiting["small"]
    assert behind.kind is ReasonKind.BEHIND_GANGS
    assert "needs 3 H100 node(s)" in behind.message


def test_a_part_node_head_blocks_the_whole_node_gangs_behind_it() -> None:
    full = [(part(f"h{g}", gpus=1), g, -1) for g in range(8)]
    made = run([part("eight", gpus=8), waiting("gang", 1)], 1, shared_with(full), keep=1)
    assert [r.kind for r in made.waiting["eight"]] == [ReasonKind.WAITING_FOR_CAPACITY]
    assert [r.kind for r in made.waiting["gang"]] == [ReasonKind.WAITING_FOR_CAPACITY, ReasonKind.BEHIND_GANGS]
    assert "8 H100 GPU(s) on one node" in made.waiting["gang"][1].message


def test_a_request_no_node_of_its_model_holds_is_passed_over() -> None:
    made = run([part("huge", gpus=1, cpu=200_000), part("next", gpus=1)], 1, shared_with([]))
    [reason] = made.waiting["huge"]
    assert reason.kind is ReasonKind.NO_ACCEPTABLE_MODEL
    assert "an H100 node has 112 CPU in all, 200 asked" in reason.message
    assert [p.row.allocation_id for p in made.parts] == ["next"]


def test_what_each_asks_reads_as_words() -> None:
    assert describe(part("a", gpus=2)) == "2 H100 GPU(s) on one node"
    assert describe(part("b", mig="3g.40gb")) == "a 3g.40gb MIG slice of an H100 GPU"
    assert describe(part("c", share=250, cpu=4000)) == "a 250/1000 share of an H100 GPU with 4 CPU"
    assert describe(waiting("d", 3)) == "3 H100 node(s)"


def quota_of(tenant: str, nodes: int, *, borrow: int = 0, cohort: str = "") -> Quota:
    return Quota(tenant, "H100", nodes, borrow, cohort, "operator", 0)


def with_quotas(queue: list[Allocation], ledger: Ledger, *, free: int) -> Plan:
    """``queue`` planned on ``free`` free nodes, no node shared yet, under ``ledger``'s quotas."""
    pool = Pool(node(i) for i in range(free))
    return plan(queue, pool, policy=FIRST_FIT, keep=0, fleet_nodes=free, fleet_block=free, ledger=ledger)


def test_part_node_work_counts_against_a_quota_by_its_gpus() -> None:
    """A one-node quota is eight GPUs: four 2-GPU allocations fit, the fifth waits over the
    quota, passed over by another tenant's."""
    queue = [part(f"a{i}", gpus=2) for i in range(5)] + [part("b", tenant="bolt", gpus=1)]
    made = with_quotas(queue, Ledger([quota_of("acme", 1)], {}), free=3)
    assert sorted(p.row.allocation_id for p in made.parts) == ["a0", "a1", "a2", "a3", "b"]
    [reason] = made.waiting["a4"]
    assert reason.kind is ReasonKind.QUOTA_EXCEEDED
    assert reason.figures == {
        "used": 1,
        "limit": 1,
        "nominal": 1,
        "needed": 0,
        "used_gpu_milli": 8000,
        "limit_gpu_milli": 8000,
        "needed_gpu_milli": 2000,
    }
    assert "tenant acme holds 8 of 8 H100 GPU(s) (its quota 1 node(s)" in reason.message
    assert "2 H100 GPU(s) on one node asked" in reason.message


def test_a_whole_node_does_not_fit_a_quota_that_part_node_work_uses() -> None:
    made = with_quotas([waiting("whole", 1)], Ledger([quota_of("acme", 1)], {"acme": 1000}), free=2)
    assert made.admitted == []
    [reason] = made.waiting["whole"]
    assert reason.kind is ReasonKind.QUOTA_EXCEEDED
    assert (reason.figures["used"], reason.figures["used_gpu_milli"], reason.figures["needed_gpu_milli"]) == (
        1,
        1000,
        8000,
    )
    assert "holds 1 of 8 H100 GPU(s)" in reason.message


def test_a_mig_slice_and_a_share_count_their_fraction() -> None:
    """7.9 of 8 GPUs held: a 1g.10gb slice (an eighth of a GPU) would exceed the quota, a
    tenth of a GPU fits."""
    made = with_quotas(
        [part("slice", mig="1g.10gb"), part("share", share=100)], Ledger([quota_of("acme", 1)], {"acme": 7900}), free=2
    )
    assert [p.row.allocation_id for p in made.parts] == ["share"]
    [reason] = made.waiting["slice"]
    assert reason.kind is ReasonKind.QUOTA_EXCEEDED
    assert reason.figures["needed_gpu_milli"] == 125
    assert "holds 7.9 of 8 H100 GPU(s)" in reason.message


def test_a_cohort_lends_only_whole_nodes_its_part_node_work_leaves() -> None:
    """acme uses one GPU of its two nodes: bolt, holding two nodes against its one, has
    borrowed the one whole node left and may not borrow the seven GPUs beyond it."""
    quotas = Ledger(
        [quota_of("acme", 2, cohort="lab"), quota_of("bolt", 1, borrow=4, cohort="lab")],
        {"acme": 1000, "bolt": 16000},
    )
    assert quotas.limit("bolt") == 2
    made = with_quotas([part("more", tenant="bolt", gpus=1)], quotas, free=4)
    assert made.parts == []
    [reason] = made.waiting["more"]
    assert reason.kind is ReasonKind.QUOTA_EXCEEDED
    assert "holds 16 of 16 H100 GPU(s) (its quota 1 node(s), and 1 it may borrow" in reason.message

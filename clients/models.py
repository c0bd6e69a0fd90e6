"""Plain Python objects returned by the client: no protobuf leaks past this layer.

Enumerations are strings without their proto prefix: ``"H100"``, ``"READY"``, ``"ACTIVE"``.
Times are timezone-aware UTC datetimes, None when unset.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar, overload

T = TypeVar("T")


@dataclass(frozen=True)
class Tenant:
    """A customer of the cloud; every allocation, invoice and metric read is scoped to one tenant."""

    tenant_id: str
    display_name: str
    create_time: datetime | None


@dataclass(frozen=True)
class Gpu:
    """One GPU of a node: its NVML UUID (``GPU-5f3c...``) and its index on the node."""

    uuid: str
    index: int


@dataclass(frozen=True)
class Node:
    """A bare-metal node: its GPUs, where it sits (zone, rack, leaf switch), its lifecycle ``state``, whether
    placement skips it (``cordoned``), why it is cordoned or draining (``status_reason``, as the operator gave it)
    and the allocation holding it, if any."""

    node_id: str
    gpu_model: str
    gpus: tuple[Gpu, ...]
    zone: str
    rack: str
    leaf_switch: str
    state: str
    cordoned: bool
    status_reason: str
    allocation_id: str | None
    create_time: datetime | None
    state_change_time: datetime | None
    # Registered by its agent, which runs its burn-in and scrub.
    agent_managed: bool = False
    # Its agent has missed too many heartbeats; placement skips it.
    unreachable: bool = False


@dataclass(frozen=True)
class NodeEvent:
    """One recorded state change of a node: the event, the states it moved between, why, and who made it
    (``actor``: ``operator:<token id>``, ``tenant:<tenant id>``, ``agent:<node id>`` or ``control-plane``)."""

    node_id: str
    event: str
    from_state: str
    to_state: str
    reason: str
    actor: str
    time: datetime | None


@dataclass(frozen=True)
class HealthAutomation:
    """Whether the health controller may take a pool's nodes (one GPU model) out of service;
    ``reason``, ``actor`` and ``updated`` say who paused or resumed it, and why (empty and
    None for a pool never set)."""

    gpu_model: str
    paused: bool
    reason: str
    actor: str
    updated: datetime | None


@dataclass(frozen=True)
class SparePool:
    """The free nodes of a pool (one GPU model) that creates leave for replacements:
    ``spares`` held back of ``free_nodes`` free now; ``actor`` and ``updated`` say who set it
    (empty and None for a pool never set)."""

    gpu_model: str
    spares: int
    free_nodes: int
    actor: str
    updated: datetime | None


@dataclass(frozen=True)
class NodeCapacity:
    """A node in service as fragmentation sees it: where it is (``leaf_switch``), its ``state``,
    its ``free_gpus`` (8 when it is free; on a ``shared`` node, held by part-node allocations,
    the whole GPUs none of them holds; 0 otherwise), whether it is ``stranded`` (READY but
    cordoned or unreachable: free, and no allocation can have it) and the whole-node allocation
    holding it, if any."""

    node_id: str
    leaf_switch: str
    state: str
    free_gpus: int
    stranded: bool
    allocation_id: str | None
    shared: bool = False


@dataclass(frozen=True)
class PoolFragmentation:
    """A pool's (one GPU model's) free capacity: ``nodes`` in service, ``free_nodes`` (READY and
    placeable), ``free_gpus`` (whole GPUs free, on free nodes and on ``shared_nodes``, those held
    by part-node allocations), ``largest_free_block`` (the most free nodes under one leaf
    switch: the largest same-block gang that fits now), ``stranded_gpus`` (free GPUs on READY
    nodes cordoned or unreachable), and every node in service in fabric order."""

    gpu_model: str
    nodes: int
    free_nodes: int
    free_gpus: int
    largest_free_block: int
    stranded_gpus: int
    node_capacity: tuple[NodeCapacity, ...]
    shared_nodes: int = 0


@dataclass(frozen=True)
class DefragmentationMove:
    """One node of an allocation that a plan would move to a free node elsewhere: the work on it
    checkpointed and restarted there."""

    allocation_id: str
    tenant_id: str
    from_node_id: str
    to_node_id: str


@dataclass(frozen=True)
class DefragmentationCost:
    """What a plan costs one allocation it touches: ``nodes_moved`` of its ``node_count``."""

    allocation_id: str
    tenant_id: str
    nodes_moved: int
    node_count: int


@dataclass(frozen=True)
class DefragmentationPlan:
    """What ``plan_defragmentation`` proposes: the leaf switches its moves would free whole
    (cheapest first), the moves, their cost per allocation, and the plan in a sentence (or why
    there is none). A plan only: nothing has moved."""

    freed_leaf_switches: tuple[str, ...]
    moves: tuple[DefragmentationMove, ...]
    costs: tuple[DefragmentationCost, ...]
    summary: str


@dataclass(frozen=True)
class DefragmentationApplied:
    """What ``apply_defragmentation`` made: every move asked, with its allocation's tenant (each
    allocation now runs on ``to_node_id``; ``from_node_id`` is being scrubbed), and how many of
    them this call made (the rest an earlier call had made)."""

    moves: tuple[DefragmentationMove, ...]
    made: int


@dataclass(frozen=True)
class IsolationViolation:
    """A node whose fabric partitions break tenant isolation: ``kind`` is TWO_PARTITIONS,
    FREE_NODE_IN_PARTITION or ANOTHER_TENANTS_PARTITION; ``message`` says what is wrong."""

    node_id: str
    kind: str
    message: str
    state: str
    reported_partition_keys: tuple[int, ...]
    tenant_id: str
    expected_partition_key: int


@dataclass(frozen=True)
class IsolationAudit:
    """What ``audit_isolation`` found: how many nodes it checked, and every violation."""

    nodes_checked: int
    violations: list[IsolationViolation]


@dataclass(frozen=True)
class NodeReplacement:
    """A node the health controller took from an allocation at ``time``, and the spare in its
    place since ``spare_time`` (None: none has been free, and the allocation is degraded);
    ``reason`` is the decision's evidence."""

    removed_node_id: str
    spare_node_id: str | None
    reason: str
    time: datetime | None
    spare_time: datetime | None


@dataclass(frozen=True)
class GpuHold:
    """What a part-node allocation holds of one GPU of its node: the GPU's index on the node and
    UUID (``gpu_index`` -1 and ``gpu_uuid`` empty for CPU and memory alone), the thousandths of the
    GPU held (``milli``: 1000 for a whole GPU, a share's own, 125 per memory slice of a MIG slice)
    and a MIG slice's first memory slice on the GPU (``mig_start``, -1 unless MIG)."""

    node_id: str
    gpu_index: int
    gpu_uuid: str
    milli: int
    mig_start: int


@dataclass(frozen=True)
class Allocation:
    """A tenant's hold on whole nodes of one GPU model, or on part of one node. While ``state`` is
    ``PENDING`` it waits in its model's queue holding nothing, at ``queue_position`` (1 for the
    head; 0 in any other state), and ``admit_time`` is None; ``priority`` (0-1000) orders that
    queue, higher first. Billing for it
    runs from ``admit_time`` and ends at ``cancel_time``, when its cancel was accepted;
    ``release_time`` is when its last node came back from the scrub.
    ``replacements`` lists the nodes taken from it for faults, with their spares; while it holds
    fewer nodes than ``node_count`` for want of a spare, ``degraded_reason`` says so.
    ``same_block``: it asked for every node under one leaf switch. ``preempted_reason`` is set when
    the scheduler cancelled it so that another tenant of its cohort could have back the quota it
    was borrowing: who reclaimed what, and what it held.
    A part-node allocation (``node_count`` 0) asks for one of ``gpus`` whole GPUs, a MIG slice
    (``mig_profile``) or a soft share of one GPU (``share_milli`` thousandths), or for none of them
    and CPU and memory alone, with ``cpu_milli`` (thousandths of a core) and ``memory_mib`` beside;
    once admitted its ``node_ids`` is its one node and ``gpu_holds`` what it holds there."""

    allocation_id: str
    tenant_id: str
    gpu_model: str
    node_count: int
    state: str
    node_ids: tuple[str, ...]
    create_time: datetime | None
    cancel_time: datetime | None = None
    release_time: datetime | None = None
    replacements: tuple[NodeReplacement, ...] = ()
    degraded_reason: str = ""
    priority: int = 0
    queue_position: int = 0
    admit_time: datetime | None = None
    same_block: bool = False
    preempted_reason: str = ""
    gpus: int = 0
    mig_profile: str = ""
    share_milli: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_holds: tuple[GpuHold, ...] = ()
    # The other GPU models it accepts, in order: while PENDING those after gpu_model, once
    # admitted onto one of them the rest.
    other_models: tuple[str, ...] = ()

    @property
    def part_node(self) -> bool:
        """Whether it asks for part of one node (GPUs, a MIG slice, a share, or CPU and memory)."""
        return bool(self.gpus or self.mig_profile or self.share_milli or self.cpu_milli or self.memory_mib)


@dataclass(frozen=True)
class CreatedAllocation(Allocation):
    """What ``create_allocation`` answers: the allocation, and whether the server answered it from
    the record of an earlier call with the same ``request_id`` (``replayed``: an earlier try of
    the same call whose reply was lost, or another caller that sent the same key), in which case
    this call allocated nothing new."""

    replayed: bool = False


@dataclass(frozen=True)
class Quota:
    """A tenant's quota of one GPU model: it may hold ``nodes`` of its own, and borrow up to
    ``borrow_limit`` more of what the other tenants of its ``cohort`` ("" for none) leave unused;
    ``used_nodes`` is what its ACTIVE allocations of the model hold now (part-node ones as a
    nodes' worth of their GPUs, rounded up), and ``used_gpu_milli`` the same in thousandths of
    a GPU (8,000 a node; 0 from a server that does not say). ``actor`` and ``update_time`` say
    who set it last, and when. A tenant without a quota of a model is not limited."""

    tenant_id: str
    gpu_model: str
    nodes: int
    borrow_limit: int
    cohort: str
    used_nodes: int
    actor: str
    update_time: datetime | None
    used_gpu_milli: int = 0


@dataclass(frozen=True)
class PendingReason:
    """One reason a PENDING allocation waits: ``kind`` (ADMISSION_DUE, WAITING_FOR_CAPACITY,
    BEHIND_GANGS, NO_ACCEPTABLE_MODEL, TOPOLOGY, QUOTA_EXCEEDED or WAITING_FOR_PREEMPTION), a
    sentence with its figures, and the figures by name (``free``, ``needed``, ``spares``,
    ``position``, ``ahead``, ``fleet``, ``used``, ``limit``, ``nominal``, ``reclaiming``...)."""

    kind: str
    message: str
    figures: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AllocationExplanation:
    """What ``explain_allocation`` answers: the allocation as it stands and, while it is
    PENDING, why it waits, most binding reason first (empty in any other state)."""

    allocation: Allocation
    reasons: tuple[PendingReason, ...] = ()


@dataclass(frozen=True)
class Operation:
    """A long-running operation. ``allocation`` is its response once done."""

    name: str
    done: bool
    allocation_id: str
    state: str
    nodes_total: int
    nodes_released: int
    request_time: datetime | None
    release_time: datetime | None
    allocation: Allocation | None = None
    error_code: int | None = None
    error_message: str | None = None


@dataclass(frozen=True)
class ApiToken:
    """An API credential as operators see it, never with its secret. ``role`` is ``OPERATOR``, ``TENANT`` or
    ``AGENT``; ``tenant_id`` is set for a tenant's token, ``node_id`` for an agent's; ``revoke_time`` is None while
    the token is valid."""

    token_id: str
    role: str
    tenant_id: str | None
    node_id: str | None
    create_time: datetime | None
    revoke_time: datetime | None


@dataclass(frozen=True)
class CreatedToken:
    """A token just minted: its plaintext (shown only once) and its public id, to list or revoke it by."""

    token: str
    token_id: str


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing; pass ``next_page_token`` back for the next (empty at the end)."""

    items: list[T] = field(default_factory=list)
    next_page_token: str = ""

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        return self.items[index]

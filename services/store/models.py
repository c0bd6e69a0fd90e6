"""The relational schema of the control plane, as SQLModel tables.

Times are integer microseconds since the epoch (UTC) so that both SQLite and PostgreSQL keep
them exactly and keyset cursors compare integers. Invariants that must hold under concurrency
live here as constraints, not in Python:

- a node is in at most one live assignment (``uq_assignment_live_node``, partial unique index);
- an idempotency key is unique per (tenant, method, request_id) (primary key);
- a GPU UUID belongs to one node (primary key).

Changing this file needs a new Alembic revision under ``services/store/migrations/versions``;
tests/services/store/test_migrations.py fails while the two disagree.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, LargeBinary, Table, Text, UniqueConstraint, text
from sqlalchemy import inspect as sa_inspect
from sqlmodel import Field, SQLModel

_LIVE = text("released_us IS NULL")


class TenantRow(SQLModel, table=True):
    """A tenant: a customer of the cloud, whose tokens, allocations and invoices refer to it."""

    __tablename__ = "tenants"

    tenant_id: str = Field(primary_key=True, max_length=63)
    display_name: str = Field(max_length=256)
    created_us: int = Field(sa_column=Column(BigInteger, nullable=False))


class PartitionKeyRow(SQLModel, table=True):
    """A tenant's fabric partition key (InfiniBand pkey style), given at its creation: the
    database numbers them, so two tenants never share one."""

    __tablename__ = "partition_keys"

    partition_key: int | None = Field(default=None, primary_key=True)
    tenant_id: str = Field(foreign_key="tenants.tenant_id", unique=True, max_length=63)


class TokenRow(SQLModel, table=True):
    """An API credential. Only a SHA-256 of the secret is stored."""

    __tablename__ = "api_tokens"

    token_id: str = Field(primary_key=True, max_length=32)
    secret_sha256: str = Field(max_length=64)
    role: str = Field(max_length=16)
    tenant_id: str | None = Field(default=None, foreign_key="tenants.tenant_id", max_length=63)
    node_id: str | None = Field(default=None, max_length=63)
    created_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    revoked_us: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class NodeRow(SQLModel, table=True):
    """A machine of the fleet: its GPU model, place in the fabric, lifecycle state and cordon and drain flags."""

    __tablename__ = "nodes"
    # Placement's candidates (services/nodes/repository.py free_nodes): the WHERE's model and
    # state, and the rows already in fabric order, so the read need not sort them.
    __table_args__ = (Index("ix_nodes_placement", "gpu_model", "state", "zone", "rack", "leaf_switch", "node_id"),)

    node_id: str = Field(primary_key=True, max_length=63)
    gpu_model: str = Field(max_length=16)
    zone: str = Field(max_length=63)
    rack: str = Field(max_length=63)
    leaf_switch: str = Field(max_length=63)
    state: str = Field(max_length=16)
    cordoned: bool = Field(default=False)
    status_reason: str = Field(default="", max_length=256)
    # Set by a drain: when the node's scrub finishes it is quarantined instead of made READY.
    drain_pending: bool = Field(default=False)
    created_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    state_changed_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    # Registered by its agent: burn-in and scrub wait for the agent's reports (services/fleet/).
    agent_managed: bool = Field(default=False, sa_column_kwargs={"server_default": text("false")})
    # Set by the node reconciler after too many missed heartbeats; placement skips the node.
    unreachable: bool = Field(default=False, sa_column_kwargs={"server_default": text("false")})
    # The last heartbeat any replica heard, written coarsely and in batches (services/fleet/heartbeats.py).
    last_heartbeat_us: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class GpuRow(SQLModel, table=True):
    """One GPU of a node, by its NVML UUID, with its index on the node."""

    __tablename__ = "gpus"
    __table_args__ = (
        UniqueConstraint("node_id", "gpu_index", name="uq_gpus_node_index"),
        # Registration looks GPUs up by lower(gpu_uuid), so that rows stored before UUIDs were
        # made canonical still match (nodes.repository.gpu_owners): without this, a scan of
        # every GPU of the fleet per RegisterNode.
        Index("ix_gpus_uuid_lower", text("lower(gpu_uuid)")),
    )

    gpu_uuid: str = Field(primary_key=True, max_length=96)
    node_id: str = Field(foreign_key="nodes.node_id", max_length=63, index=True)
    gpu_index: int
    # As the node's agent last registered it; NULL where not reported (or an operator registered the node).
    name: str | None = Field(default=None, max_length=96)
    serial: str | None = Field(default=None, max_length=64)
    memory_bytes: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    driver_version: str | None = Field(default=None, max_length=32)
    vbios_version: str | None = Field(default=None, max_length=32)
    inforom_version: str | None = Field(default=None, max_length=32)
    rail: int | None = Field(default=None)


class NodeStatusRow(SQLModel, table=True):
    """What a node's agent last reported observing (AgentService ReportStatus), as JSON."""

    __tablename__ = "node_status"

    node_id: str = Field(primary_key=True, foreign_key="nodes.node_id", max_length=63)
    status_json: str = Field(sa_column=Column(Text, nullable=False))
    reported_us: int = Field(sa_column=Column(BigInteger, nullable=False))


class HealthObservationRow(SQLModel, table=True):
    """One bad signal an agent's status carried (services/health/signals.py): a strike the
    health policy counts. ``seq`` orders the strikes of one report; ``gpu_index`` is None for
    the node as a whole."""

    __tablename__ = "health_observations"
    # The health controller reads a node's strikes within the policy's longest window, and the
    # resync the nodes with strikes since a time.
    __table_args__ = (
        Index("ix_health_observations_at", "at_us"),
        # A journaled XID (seq < 0, its agent's journal number negated) is known by the agent's
        # own time: the at_us it is counted at is clamped to its status's arrival, which a
        # replay does not share.
        Index("ux_health_observations_journal", "node_id", "agent_ms", "seq", unique=True),
    )

    node_id: str = Field(primary_key=True, foreign_key="nodes.node_id", max_length=63)
    at_us: int = Field(sa_column=Column(BigInteger, primary_key=True))
    seq: int = Field(primary_key=True)
    gpu_index: int | None = Field(default=None)
    signal: str = Field(max_length=64)
    agent_ms: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class HealthAutomationRow(SQLModel, table=True):
    """An operator's pause of the health controller's removals in one pool (a GPU model); a
    pool without a row is automated."""

    __tablename__ = "health_automation"

    gpu_model: str = Field(primary_key=True, max_length=16)
    paused: bool
    reason: str = Field(default="", max_length=256)
    actor: str = Field(max_length=96)
    updated_us: int = Field(sa_column=Column(BigInteger, nullable=False))


class SparePoolRow(SQLModel, table=True):
    """How many free nodes of one GPU model creates must leave for replacements; a model
    without a row keeps none."""

    __tablename__ = "spare_pools"

    gpu_model: str = Field(primary_key=True, max_length=16)
    spares: int
    actor: str = Field(max_length=96)
    updated_us: int = Field(sa_column=Column(BigInteger, nullable=False))


class QuotaRow(SQLModel, table=True):
    """How many nodes of one GPU model a tenant may hold, and how many more it may borrow from
    the unused quota of its cohort; a tenant without a row for a model is not limited."""

    __tablename__ = "quotas"

    tenant_id: str = Field(foreign_key="tenants.tenant_id", primary_key=True, max_length=63)
    gpu_model: str = Field(primary_key=True, max_length=16)
    nodes: int
    borrow_limit: int
    # Tenants of one cohort lend one another their unused quota of the model ("" for none).
    cohort: str = Field(default="", max_length=63)
    actor: str = Field(max_length=96)
    updated_us: int = Field(sa_column=Column(BigInteger, nullable=False))


class ActionResultRow(SQLModel, table=True):
    """An action's result as the node's agent reported it: burn-in figures or a scrub report, as JSON.

    Keyed by the action id, which names one attempt (services/fleet/actions.py), so a result
    reported twice is stored once and a result of an earlier attempt never answers a later one.
    """

    __tablename__ = "action_results"
    # The burn-in median reads a model's latest results (services/fleet/repository.py).
    __table_args__ = (Index("ix_action_results_kind_reported", "kind", "reported_us"),)

    node_id: str = Field(primary_key=True, foreign_key="nodes.node_id", max_length=63)
    action_id: str = Field(primary_key=True, max_length=64)
    kind: str = Field(max_length=16)
    result_json: str = Field(sa_column=Column(Text, nullable=False))
    error: str = Field(default="", max_length=256)
    reported_us: int = Field(sa_column=Column(BigInteger, nullable=False))


class NodeEventRow(SQLModel, table=True):
    """One state change of a node, with its cause: the read path of "why is it in this state"."""

    __tablename__ = "node_events"
    # The fleet-wide reads by time (the health controller's decisions since a time).
    __table_args__ = (Index("ix_node_events_at", "at_us"),)

    event_seq: int | None = Field(default=None, primary_key=True)
    node_id: str = Field(foreign_key="nodes.node_id", max_length=63, index=True)
    event: str = Field(max_length=32)
    from_state: str = Field(max_length=16)
    to_state: str = Field(max_length=16)
    reason: str = Field(default="", max_length=256)
    actor: str = Field(max_length=96)
    at_us: int = Field(sa_column=Column(BigInteger, nullable=False))


class AllocationRow(SQLModel, table=True):
    """A tenant's allocation of whole nodes of one GPU model; ``assignments`` holds its nodes
    once admitted."""

    __tablename__ = "allocations"
    __table_args__ = (
        # The keyset order of ListAllocations: immutable create time, unique id tiebreaker.
        Index("ix_allocations_tenant_order", "tenant_id", "created_us", "allocation_id"),
        Index("ix_allocations_order", "created_us", "allocation_id"),
        # The releaser's read: CANCELLING allocations, oldest cancel first.
        Index("ix_allocations_state", "state", "cancel_us"),
        # The scheduler's read: a model's queue of PENDING allocations, in admission order.
        Index("ix_allocations_queue", "state", "gpu_model", "priority", "created_us"),
    )

    allocation_id: str = Field(primary_key=True, max_length=40)
    tenant_id: str = Field(foreign_key="tenants.tenant_id", max_length=63)
    gpu_model: str = Field(max_length=16)
    node_count: int
    state: str = Field(max_length=16)
    created_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    cancel_us: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    released_us: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    # Higher is admitted first; among equals, the older request.
    priority: int = Field(default=0, sa_column_kwargs={"server_default": text("0")})
    # When the scheduler placed its nodes and its usage started; NULL while PENDING.
    admitted_us: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    # Every node under one leaf switch (fabric block), or none.
    same_block: bool = Field(default=False, sa_column_kwargs={"server_default": text("false")})
    # Why the scheduler cancelled it to give its nodes back to their quota's owner; NULL otherwise.
    preempted_reason: str | None = Field(default=None, max_length=512)
    # Part of one node instead of whole nodes (node_count 0): whole GPUs, one MIG slice or a
    # soft share of a GPU (at most one of the three), and CPU and memory beside them. Its
    # holds are ``gpu_holds``.
    gpus: int = Field(default=0, sa_column_kwargs={"server_default": text("0")})
    mig_profile: str = Field(default="", max_length=16, sa_column_kwargs={"server_default": text("''")})
    share_milli: int = Field(default=0, sa_column_kwargs={"server_default": text("0")})
    cpu_milli: int = Field(default=0, sa_column_kwargs={"server_default": text("0")})
    memory_mib: int = Field(default=0, sa_column_kwargs={"server_default": text("0")})
    # Further GPU models it accepts, comma-separated in order of preference ("" for none).
    other_models: str = Field(default="", max_length=64, sa_column_kwargs={"server_default": text("''")})
    # Asked not to wait: the scheduling cycle admits it now or withdraws it (deletes the row).
    fail_if_unavailable: bool = Field(default=False, sa_column_kwargs={"server_default": text("false")})


class AssignmentRow(SQLModel, table=True):
    """A node held by an allocation. Live while ``released_us`` is NULL; ``replaced_us`` is
    set when the health controller took the node from the allocation (``replacements``)."""

    __tablename__ = "assignments"
    __table_args__ = (
        Index(
            "uq_assignment_live_node",
            "node_id",
            unique=True,
            sqlite_where=_LIVE,
            postgresql_where=_LIVE,
        ),
        Index("ix_assignments_allocation", "allocation_id"),
    )

    assignment_id: int | None = Field(default=None, primary_key=True)
    allocation_id: str = Field(foreign_key="allocations.allocation_id", max_length=40)
    node_id: str = Field(foreign_key="nodes.node_id", max_length=63)
    tenant_id: str = Field(max_length=63)
    position: int
    assigned_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    released_us: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    replaced_us: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class GpuHoldRow(SQLModel, table=True):
    """What a part-node allocation holds of one GPU of its node (``gpu_index`` -1: CPU and
    memory alone, no GPU). Live while ``released_us`` is NULL. A node with live holds is
    ALLOCATED (a shared node) and leaves for its scrub when the last of them is released."""

    __tablename__ = "gpu_holds"
    __table_args__ = (
        # A scheduling cycle's read: the live holds of a model's shared nodes.
        Index("ix_gpu_holds_live_node", "node_id", sqlite_where=_LIVE, postgresql_where=_LIVE),
        Index("ix_gpu_holds_allocation", "allocation_id"),
    )

    hold_id: int | None = Field(default=None, primary_key=True)
    allocation_id: str = Field(foreign_key="allocations.allocation_id", max_length=40)
    tenant_id: str = Field(max_length=63)
    node_id: str = Field(foreign_key="nodes.node_id", max_length=63)
    gpu_index: int
    # Thousandths of the GPU: 1000 whole, a share's own, 125 per memory slice of a MIG slice.
    milli: int
    # A MIG slice's first memory slice; -1 otherwise.
    mig_start: int
    assigned_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    released_us: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class ReplacementRow(SQLModel, table=True):
    """A node the health controller took from an allocation, and the spare that took its place
    (NULL: none was free yet, and the allocation runs degraded)."""

    __tablename__ = "replacements"

    allocation_id: str = Field(foreign_key="allocations.allocation_id", primary_key=True, max_length=40)
    removed_node_id: str = Field(foreign_key="nodes.node_id", primary_key=True, max_length=63)
    spare_node_id: str | None = Field(default=None, foreign_key="nodes.node_id", max_length=63)
    position: int
    reason: str = Field(max_length=512)
    at_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    # When the spare took the place: at_us, or later for an allocation topped up once a node freed.
    spare_us: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class IdempotencyKeyRow(SQLModel, table=True):
    """The first outcome of a request_id, replayed to every retry of it."""

    __tablename__ = "idempotency_keys"
    # The janitor's read: the oldest keys first (services/allocations/janitor.py).
    __table_args__ = (Index("ix_idempotency_keys_created", "created_us"),)

    tenant_id: str = Field(primary_key=True, max_length=63)
    method: str = Field(primary_key=True, max_length=64)
    request_id: str = Field(primary_key=True, max_length=64)
    fingerprint: str = Field(max_length=64)
    result_id: str = Field(max_length=64)
    created_us: int = Field(sa_column=Column(BigInteger, nullable=False))


class OperationRow(SQLModel, table=True):
    """A long-running operation; kept after it is done so clients can poll late."""

    __tablename__ = "operations"
    __table_args__ = (
        UniqueConstraint("kind", "target_id", name="uq_operations_kind_target"),
        Index("ix_operations_tenant_order", "tenant_id", "created_us", "operation_id"),
    )

    operation_id: str = Field(primary_key=True, max_length=48)
    tenant_id: str = Field(max_length=63)
    kind: str = Field(max_length=32)
    target_id: str = Field(max_length=64)
    done: bool = Field(default=False)
    error_code: int | None = None
    error_message: str | None = Field(default=None, max_length=512)
    created_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    done_us: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class UsageEventRow(SQLModel, table=True):
    """A GPU handed to or taken back from a tenant: the durable record billing is computed from.

    Written in the same transaction as the state change that causes it (an outbox), never from
    timers. The id is deterministic (allocation, GPU, kind), so a replayed or retried
    transaction cannot bill twice. ``source`` says who observed it: the control plane now;
    node agents that spool events through an outage will add theirs with their own ids.
    """

    __tablename__ = "usage_events"
    __table_args__ = (
        Index("ix_usage_events_tenant_time", "tenant_id", "at_us"),
        # The keyset order of ListUsageEvents across tenants: immutable time, unique id tiebreaker.
        Index("ix_usage_events_time", "at_us", "event_id"),
    )

    event_id: str = Field(primary_key=True, max_length=200)
    tenant_id: str = Field(max_length=63)
    allocation_id: str = Field(max_length=40)
    node_id: str = Field(max_length=63)
    # A GPU's uuid (up to 96 characters), or a MIG slice's or soft share's unit:
    # "<gpu uuid>/<allocation id>" (services/usage/repository.py).
    gpu_uuid: str = Field(max_length=160)
    gpu_model: str = Field(max_length=16)
    kind: str = Field(max_length=8)
    at_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    source: str = Field(max_length=32)
    recorded_us: int = Field(sa_column=Column(BigInteger, nullable=False))


class FinalizedInvoiceRow(SQLModel, table=True):
    """A tenant's invoice for one period, frozen by FinalizeInvoice. Inserted once, never updated.

    ``body`` is the invoice as JSON (services/billing/codec.py); ``rates`` the rate card it was
    priced with, so a later recomputation of the period (for adjustments) prices late usage at
    the period's own rates even after the server's rate card changed.
    """

    __tablename__ = "finalized_invoices"

    tenant_id: str = Field(primary_key=True, foreign_key="tenants.tenant_id", max_length=63)
    # "YYYY-MM"; the primary key makes (tenant_id, period) unique: one frozen invoice per period.
    period: str = Field(primary_key=True, max_length=7)
    finalized_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    # Events recorded at or after this instant were not known to the frozen computation.
    snapshot_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    body: str = Field(sa_column=Column(Text, nullable=False))
    rates: str = Field(sa_column=Column(Text, nullable=False))
    # JSON {"YYYY-MM": n}: how many events before each period's end the computation read, for
    # this period and each one it carried corrections of (services/billing/compute.py).
    input_counts: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class SecretRow(SQLModel, table=True):
    """Server-wide secrets shared by every replica (the page-token signing key)."""

    __tablename__ = "server_secrets"

    name: str = Field(primary_key=True, max_length=64)
    value: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class LeaseRow(SQLModel, table=True):
    """A named lease that one replica holds at a time (the reconciler's leadership).

    Times are the holder's wall clock; a lease whose ``expires_us`` has passed is free to take
    (services/control/repository.py).
    """

    __tablename__ = "leases"

    name: str = Field(primary_key=True, max_length=64)
    holder: str = Field(max_length=255)
    acquired_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    renewed_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    expires_us: int = Field(sa_column=Column(BigInteger, nullable=False))


def table_of(model: type[SQLModel]) -> Table:
    """The Core table behind a model, for bulk statements on hot paths (no ORM unit of work)."""
    table = sa_inspect(model).local_table
    assert isinstance(table, Table)
    return table

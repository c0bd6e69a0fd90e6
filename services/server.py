"""Wiring of the control plane: store, servicers, interceptor, health, reflection, loops.

``ControlPlane`` owns everything it starts: the gRPC server and a manager of background loops
(services/control/manager.py), which restarts a loop that crashes. ``stop`` flips health to
NOT_SERVING, drains RPCs for a grace period, stops the loops and closes the database, leaking
no task.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import structlog
from google.longrunning import operations_pb2, operations_pb2_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from accounting import Rates, load_rate_card
from gpucloud.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    allocation_pb2,
    allocation_pb2_grpc,
    billing_pb2,
    billing_pb2_grpc,
    metrics_pb2,
    metrics_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    tenant_pb2,
    tenant_pb2_grpc,
    token_pb2,
    token_pb2_grpc,
)
from services.allocations.degraded import DegradedSweep
from services.allocations.janitor import KeyJanitor
from services.allocations.placement import Policies
from services.allocations.releaser import Releaser
from services.allocations.scheduler import Scheduler
from services.allocations.servicer import AllocationServicer
from services.auth.authenticator import Authenticator
from services.auth.repository import OPERATOR_TOKEN_FILE, bootstrap_operator
from services.billing.commands import Billing
from services.billing.servicer import BillingServicer
from services.control.manager import Manager
from services.data_dir import OpenDataDirectory, make_private
from services.fleet.config import FleetConfig
from services.fleet.directives import Directives
from services.fleet.heartbeats import Heartbeats
from services.fleet.leader import FleetLeader
from services.fleet.reachability import Reachability
from services.fleet.reconciler import NodeReconciler
from services.fleet.servicer import AgentServicer
from services.health.config import HealthConfig
from services.health.controller import ACTOR as HEALTH_ACTOR
from services.health.controller import NodeHealth
from services.health.slow_gpus import SlowGpuSweep
from services.interceptors import ControlPlaneInterceptor
from services.limits import CallLimiter, CallLimits
from services.metrics.commands import Metrics
from services.metrics.maintenance import Maintenance
from services.metrics.samples import SampleStore
from services.metrics.series_limits import SeriesLimits
from services.metrics.servicer import MetricsServicer
from services.nodes.servicer import NodeServicer
from services.notify import Notifier
from services.operations.builder import OperationBuilder
from services.operations.servicer import OperationsServicer
from services.operations.watch import OperationWatch
from services.paging import PageTokens
from services.store import secrets
from services.store.engine import DATABASE_FILE, Database, UnsupportedDatabaseUrl, sqlite_url
from services.tenants.servicer import TenantServicer
from services.tokens.servicer import TokenServicer
from tsdb import StoreLockedError

log = structlog.get_logger(__name__)


class StartError(RuntimeError):
    """The control plane could not start (address taken, database unreachable); the message
    says what to fix."""


def _refuse_lost_database(data_dir: Path) -> None:
    """StartError when the data directory has run a server (its operator token is there) but its
    SQLite file is gone: starting would quietly make an empty database beside the old metrics
    and overwrite the token, and everything the old file held would read as never having been."""
    database = data_dir / DATABASE_FILE
    if not database.exists() and (data_dir / OPERATOR_TOKEN_FILE).exists():
        raise StartError(
            f"{data_dir} has {OPERATOR_TOKEN_FILE} but no {DATABASE_FILE}: the database was deleted or moved. "
            f"Restore it, or remove {OPERATOR_TOKEN_FILE} (and tsdb/) to start this data directory afresh"
        )


def _check_listen_address(listen: str) -> None:
    """StartError unless ``listen`` is ``host:port`` with a port 0-65535 (0: any free port):
    gRPC would take a larger port modulo 65536 and serve somewhere nobody asked for."""
    if listen.startswith("unix:"):
        return
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise StartError(f"cannot listen on {listen!r}: give host:port with a port 0-65535 (0: any free one)")


# gRPC queues the calls that arrived before the server's code has taken them. Past its soft
# bound it refuses some at random, more as the queue fills, and past its hard bound every one:
# a refused call ends CANCELLED with no details, not run and not logged (the server never saw
# it). Each queued call holds memory, so the queue is bounded, in multiples of the most calls
# the server runs at once: a burst of several times as many calls is seen, and answered, by the
# server's own bounds (services/limits.py), which refuse with RESOURCE_EXHAUSTED and log. Never
# below gRPC's own defaults: how many calls wait there depends on how fast the event loop takes
# them, not on the server's bound, and a small bound must not turn a burst into CANCELLED calls.
GRPC_PENDING_CALLS_SOFT = (4, 1_000)  # (times the most calls in flight, at least)
GRPC_PENDING_CALLS_HARD = (8, 3_000)


def grpc_pending_calls(limits: CallLimits) -> tuple[int, int]:
    """gRPC's soft and hard bounds on calls queued before the server's code takes them."""
    (soft, soft_floor), (hard, hard_floor) = GRPC_PENDING_CALLS_SOFT, GRPC_PENDING_CALLS_HARD
    return max(soft * limits.most_in_flight, soft_floor), max(hard * limits.most_in_flight, hard_floor)


SERVICE_NAMES = (
    tenant_pb2.DESCRIPTOR.services_by_name["TenantService"].full_name,
    token_pb2.DESCRIPTOR.services_by_name["TokenService"].full_name,
    node_pb2.DESCRIPTOR.services_by_name["NodeService"].full_name,
    agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
    allocation_pb2.DESCRIPTOR.services_by_name["AllocationService"].full_name,
    operations_pb2.DESCRIPTOR.services_by_name["Operations"].full_name,
    metrics_pb2.DESCRIPTOR.services_by_name["MetricsService"].full_name,
    billing_pb2.DESCRIPTOR.services_by_name["BillingService"].full_name,
)


@dataclass(frozen=True)
class ServerConfig:
    """How to run one control-plane process."""

    data_dir: Path
    listen: str = "127.0.0.1:50051"
    # None: a SQLite file in data_dir. Otherwise an SQLAlchemy async URL (postgresql+asyncpg://...).
    database_url: str | None = None
    # Stand-in for agents' scrub reports: how long a released node takes to wipe.
    scrub_seconds: float = 1.0
    # The rate card invoices are priced with (JSON); None: the built-in default (docs/billing.md).
    rates_path: Path | None = None
    grace_seconds: float = 2.0
    # The metrics store (tsdb); None: data_dir/"tsdb". It shards by node past one machine.
    metrics_dir: Path | None = None
    # Samples older than this are deleted, whole segment files at a time; None keeps everything.
    metrics_retention_seconds: float | None = 30 * 86_400.0
    # How often the maintenance worker seals the head into segments and applies retention.
    metrics_maintenance_seconds: float = 60.0
    # The most metrics series one node, and the whole store, may hold (services/metrics/series_limits.py);
    # a write that would create more is RESOURCE_EXHAUSTED. Each series costs memory while the server runs.
    metrics_max_series_per_node: int = SeriesLimits.per_node
    metrics_max_series: int = SeriesLimits.total
    # Bounds on calls in flight at once (services/limits.py, docs/api.md): per tenant, for its
    # long polls and heavy reads, per node for its agent, and every caller's together; beyond
    # one, RESOURCE_EXHAUSTED. gRPC's queue of calls not taken yet is sized from the last.
    tenant_max_calls: int = CallLimits.tenant_calls
    tenant_max_waits: int = CallLimits.tenant_waits
    tenant_max_heavy_calls: int = CallLimits.tenant_heavy_calls
    agent_max_calls: int = CallLimits.agent_calls
    max_calls_in_flight: int = CallLimits.calls_in_flight
    # Agents' heartbeats, the node reconciler's timeouts and thresholds, and its lease.
    fleet: FleetConfig = field(default_factory=FleetConfig)
    # The health controller's safety limits (services/health/config.py).
    health: HealthConfig = field(default_factory=HealthConfig)
    # The placement policy of each pool's creates (services/allocations/placement.py).
    placement: Policies = field(default_factory=Policies)

    def call_limits(self) -> CallLimits:
        """The bounds on concurrent calls; ValueError for one under 1."""
        return CallLimits(
            tenant_calls=self.tenant_max_calls,
            tenant_waits=self.tenant_max_waits,
            tenant_heavy_calls=self.tenant_max_heavy_calls,
            agent_calls=self.agent_max_calls,
            calls_in_flight=self.max_calls_in_flight,
        )


# googleapis-common-protos ships no types for its grpc code: the registration function, typed here.
_add_operations_servicer: Callable[[OperationsServicer, grpc.aio.Server], None] = (
    operations_pb2_grpc.add_OperationsServicer_to_server
)


class ControlPlane:
    """One running control-plane process."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.port: int | None = None
        self.operator_token_created: Path | None = None
        self._store: Database | None = None
        self._samples: SampleStore | None = None
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._agents: AgentServicer | None = None
        self._limiter: CallLimiter | None = None
        # The background loops: the releaser, the idempotency janitor, the operation watch,
        # metrics maintenance, the heartbeat flush, the agents' directives and the node
        # reconciler (under its lease). Their states and restart counts: ``loops.status()``.
        self.loops = Manager()
        # The metrics housekeeping loop, once started: a pass can also be run on demand.
        self.metrics_maintenance: Maintenance | None = None
        # Agents' heartbeats and the node reconciler's leadership, once started.
        self.heartbeats: Heartbeats | None = None
        self.fleet_leader: FleetLeader | None = None
        self.reachability: Reachability | None = None
        # The slow-GPU sweep the fleet leader runs; a sweep can also be run on demand.
        self.slow_gpus: SlowGpuSweep | None = None
        self.degraded: DegradedSweep | None = None
        self.scheduler: Scheduler | None = None

    @property
    def operator_token_path(self) -> Path:
        """The data directory's operator token file; it exists only where the first operator token was minted."""
        return self.config.data_dir / OPERATOR_TOKEN_FILE

    @property
    def address(self) -> str:
        """The ``host:port`` being served, with the port actually bound; meaningful after ``start``."""
        host = self.config.listen.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    @property
    def database(self) -> Database | None:
        """The open database (None before ``start`` and after ``stop``): for tools in the same
        process that read what the server wrote, and its ``committed`` count."""
        return self._store

    @property
    def calls_in_flight(self) -> int:
        """Calls counted by the admission bounds and not yet answered (0 before ``start``)."""
        return 0 if self._limiter is None else self._limiter.in_flight

    async def start(self) -> None:
        """Open the store (migrating it), bootstrap credentials, bind and serve. A start that
        fails closes whatever it had opened before it raises."""
        config = self.config
        _check_listen_address(config.listen)
        try:
            # 0700 whatever the umask; one that others may use is refused (services/data_dir.py).
            make_private(config.data_dir)
        except OpenDataDirectory as error:
            raise StartError(str(error)) from None
        except OSError as error:
            why = error.strerror or error
            raise StartError(f"cannot use {config.data_dir} as the data directory: {why}") from error
        # A bad rate card fails the start before anything is opened.
        rates = load_rate_card(config.rates_path)
        try:
            config.call_limits()
        except ValueError as error:
            raise StartError(f"unusable bounds on concurrent calls: {error}") from error
        # The metrics store first: its directory lock is what tells a second server on this
        # data directory to stop, before it touches the database.
        retention = config.metrics_retention_seconds
        metrics_dir = config.metrics_dir or config.data_dir / "tsdb"
        try:
            series_limits = SeriesLimits(config.metrics_max_series_per_node, config.metrics_max_series)
        except ValueError as error:
            raise StartError(f"unusable metrics series limits: {error}") from error
        try:
            samples = await SampleStore.open(
                metrics_dir,
                retention_ms=None if retention is None else int(retention * 1000),
                series_limits=series_limits,
            )
        except StoreLockedError as error:
            raise StartError(f"{metrics_dir} is in use by another gpucloud server ({error})") from error
        except OSError as error:
            raise StartError(f"cannot open the metrics store in {metrics_dir}: {error.strerror or error}") from error
        self._samples = samples
        try:
            await self._open_and_serve(samples, rates)
        except BaseException:
            await self.stop()
            raise

    async def _open_and_serve(self, samples: SampleStore, rates: Rates) -> None:
        config = self.config
        url = config.database_url or sqlite_url(config.data_dir)
        if config.database_url is None:
            _refuse_lost_database(config.data_dir)
        try:
            store = await Database.open(url)
        except UnsupportedDatabaseUrl as error:  # refused before any connection
            raise StartError(f"unusable database URL: {error}") from error
        except (OSError, sqlite3.Error, SQLAlchemyError) as error:
            # sqlite3.Error: a file there that is not a database (the driver opens it itself).
            shown = make_url(url).render_as_string(hide_password=True)
            raise StartError(f"cannot open the database {shown}: {error}") from error
        self._store = store
        page_tokens = PageTokens(await secrets.get_or_create(store, secrets.PAGE_TOKEN_KEY))

        wake_releaser, operations_changed = Notifier(), Notifier()
        limits = config.call_limits()
        pending_soft, pending_hard = grpc_pending_calls(limits)
        builder = OperationBuilder()
        authenticator = Authenticator(store)
        self._limiter = CallLimiter(limits)
        server = grpc.aio.server(
            interceptors=[ControlPlaneInterceptor(authenticator, self._limiter)],
            options=[
                # Refuse to share a port silently with another server (grpc defaults to SO_REUSEPORT).
                ("grpc.so_reuseport", 0),
                # Sized from the server's bound (see GRPC_PENDING_CALLS_SOFT): gRPC's defaults,
                # 1,000 and 3,000 queued, would refuse a burst as CANCELLED before our bounds see it.
                ("grpc.server.max_pending_requests", pending_soft),
                ("grpc.server.max_pending_requests_hard_limit", pending_hard),
            ],
        )
        # Kept before binding, so that a failed start stops it too (an unstopped grpc server
        # complains when it is collected after its loop has closed).
        self._server = server
        tenant_pb2_grpc.add_TenantServiceServicer_to_server(TenantServicer(store, page_tokens), server)
        token_pb2_grpc.add_TokenServiceServicer_to_server(TokenServicer(store, page_tokens, authenticator), server)
        node_pb2_grpc.add_NodeServiceServicer_to_server(NodeServicer(store, page_tokens), server)
        fleet = config.fleet
        # Rows of heartbeats stay fresher than the unreachable threshold (fleet/heartbeats.py).
        interval = fleet.heartbeat_interval_s
        heartbeats = Heartbeats(store, persist_every_s=interval, flush_s=interval / 2)
        directives = Directives(store, refresh_s=fleet.directives_refresh_s, heartbeat_interval_s=interval)
        reachability = Reachability(store, heartbeats, directives, fleet)
        metrics = Metrics(store, samples, maintenance_seconds=config.metrics_maintenance_seconds)
        reconciler, node_health = NodeReconciler(store, directives, fleet), NodeHealth(store, config.health)
        self.slow_gpus = SlowGpuSweep(store, metrics.outliers, config.health)
        self.degraded = DegradedSweep(store, interval_s=config.health.resync_s, actor=HEALTH_ACTOR)
        self.scheduler = scheduler = Scheduler(store, config.placement, preempted=wake_releaser)
        leader = FleetLeader(
            store, reconciler, reachability, fleet, node_health, config.health, self.slow_gpus, self.degraded, scheduler
        )
        self.heartbeats, self.fleet_leader, self.reachability = heartbeats, leader, reachability
        self._agents = AgentServicer(store, heartbeats, directives, leader)
        agent_pb2_grpc.add_AgentServiceServicer_to_server(self._agents, server)
        allocation_pb2_grpc.add_AllocationServiceServicer_to_server(
            AllocationServicer(store, page_tokens, wake_releaser, scheduler, config.placement), server
        )
        operation_watch = OperationWatch(store, builder, operations_changed)
        _add_operations_servicer(OperationsServicer(store, page_tokens, builder, operation_watch), server)
        billing = BillingServicer(Billing(store, rates), page_tokens)
        billing_pb2_grpc.add_BillingServiceServicer_to_server(billing, server)
        metrics_pb2_grpc.add_MetricsServiceServicer_to_server(MetricsServicer(metrics), server)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        try:
            self.port = server.add_insecure_port(config.listen)
        except RuntimeError as error:  # grpc's "Failed to bind to address ..."
            raise StartError(f"cannot listen on {config.listen!r}: not a free host:port ({error})") from error
        # Only once the port is ours: a start that cannot listen must not mint the first operator
        # token, or the start that can would not say where it is.
        self.operator_token_created = await bootstrap_operator(store, config.data_dir)

        releaser = Releaser(
            store, scrub_seconds=config.scrub_seconds, wake=wake_releaser, done=operations_changed, freed=scheduler.wake
        )
        # Each run() keeps no state of its own between runs (it re-reads the database, or the
        # shared watch table, every pass): a crashed one can simply be called again.
        self.loops.add("releaser", releaser.run)
        self.loops.add("idempotency-janitor", KeyJanitor(store).run)
        self.loops.add("operation-watch", operation_watch.run)
        maintenance = Maintenance(samples, interval_seconds=config.metrics_maintenance_seconds)
        self.loops.add("metrics-maintenance", maintenance.run)
        self.metrics_maintenance = maintenance
        self.loops.add("revocations", authenticator.watch_revocations)
        self.loops.add("heartbeat-flush", heartbeats.run)
        self.loops.add("directives", directives.run)
        # Waits for the lease, then runs the node reconciler and the reachability sweep.
        self.loops.add("node-reconciler", leader.run)
        self.loops.start()

        await server.start()
        for name in ("", *SERVICE_NAMES):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("control_plane_started", address=self.address, database=store.dialect, data_dir=str(config.data_dir))

    async def wait(self) -> None:
        """Wait until the server terminates; only after ``start``."""
        assert self._server is not None
        await self._server.wait_for_termination()

    async def stop(self) -> None:
        """Stop serving, drain in-flight RPCs, stop the background loops and close the store."""
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._agents is not None:
            self._agents.close_streams()  # agents' streams would hold the drain to its end
        if self._server is not None:
            await self._server.stop(self.config.grace_seconds)
        if self._limiter is not None:
            self._limiter.close()  # no call is left to refuse: log the refusals not logged yet
        await self.loops.stop()
        if self._samples is not None:
            # After the drain and the loops: nothing is left to write or read.
            await self._samples.close()
            self._samples = None
        if self._store is not None:
            await self._store.close()
            self._store = None
        log.info("control_plane_stopped")

"""Creates and cancels that share one SQLite group run set-based (allocations/set_based.py), and
every caller must still get the answer its own transaction would have given.

Each scenario is run twice on fresh stores with the same fleet: once with every call started
together (on SQLite one group, so the set runners take the plain ones) and once awaiting
each call in turn (each alone). The answers and the database they leave must be the same,
ids and timestamps aside. On PostgreSQL there are no groups and no sets: the cancel
scenarios run there too (their outcome does not depend on the order), the create scenarios
are checked there against the answers they must give in order.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest

from services.allocations import commands, set_based
from services.allocations.releaser import release_batch
from services.allocations.repository import AllocationView
from services.allocations.requests import AllocationRequest, Created
from services.allocations.writes import PendingCreate, record_creates
from services.auth.principal import CONTROL_PLANE, Principal, Role
from services.clock import now_us
from services.errors import ApiError
from services.nodes import commands as node_commands
from services.nodes.inventory import GpuModel, GpuSpec, Inventory
from services.nodes.transitions import NodeEvent
from services.operations.repository import Operation
from services.store import writer as writer_module
from services.store.engine import Database
from services.store.tx import Sql, Tx, run_on_connection
from services.store.writer import SqliteWriter
from services.tenants import commands as tenant_commands
from tests.conftest import own_database

T = TypeVar("T")
H100, A100 = GpuModel.H100, GpuModel.A100
ACME = Principal("tok-acme", Role.TENANT, tenant_id="acme")
GLOBEX = Principal("tok-globex", Role.TENANT, tenant_id="globex")
OPERATOR = Principal("tok-ops", Role.OPERATOR)
GPUS_PER_NODE = 8
SQLITE_ONLY = "SQLite only: groups and sets exist only in the SQLite writer (PostgreSQL ignores sets)"

# One answer, or one row of the database, with ids replaced by labels (see Labels).
Outcome = tuple[object, ...]


# --- Stores and fleets ------------------------------------------------------------------------


@asynccontextmanager
async def fresh_store(tmp_path: Path, name: str) -> AsyncIterator[Database]:
    """A second store on an empty database of its own, migrated by opening it."""
    async with own_database(tmp_path / f"{name}.db", None) as url:
        opened = await Database.open(url)
        try:
            yield opened
        finally:
            await opened.close()


async def add_ready_node(store: Database, node_id: str, model: GpuModel, rack: str) -> None:
    """Register a node and pass its burn-in (tests/services/store/test_races.py does the same by hand)."""
    gpus = tuple(GpuSpec(f"GPU-{node_id}-{i}", i) for i in range(GPUS_PER_NODE))
    await node_commands.register(store, CONTROL_PLANE, Inventory(node_id, model, gpus, "z", rack, "leaf"))
    await node_commands.complete_burn_in(store, CONTROL_PLANE, node_id, passed=True, detail="")


async def build_fleet(store: Database, *, h100: int, a100: int = 0) -> None:
    """Tenants acme and globex; ``h100`` READY H100 nodes h00, h01, ... and ``a100`` A100 nodes.

    Odd nodes sit in rack r0, even ones in r1, so placement order (zone, rack, leaf, id) is
    h01, h03, ..., then h00, h02, ...: first fit is deterministic but not the id order."""
    await tenant_commands.create(store, "acme", "")
    await tenant_commands.create(store, "globex", "")
    for i in range(h100):
        await add_ready_node(store, f"h{i:02d}", H100, f"r{1 - i % 2}")
    for i in range(a100):
        await add_ready_node(store, f"a{i:02d}", A100, "r0")


def writer_of(store: Database) -> SqliteWriter:
    writer = store._writer
    assert writer is not None
    return writer


async def together(store: Database, calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T | BaseException]:
    """Start every call at once; on SQLite, check they shared one group (one commit)."""
    writer = store._writer
    before = None if writer is None else writer.commits
    results = await asyncio.gather(*(call() for call in calls), return_exceptions=True)
    if writer is not None:
        assert writer.commits - (before or 0) == 1, "the calls did not share one group: the set was not exercised"
    return list(results)


async def in_order(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T | BaseException]:
    """Await each call before starting the next: each runs alone."""
    results: list[T | BaseException] = []
    for call in calls:
        try:
            results.append(await call())
        except Exception as error:
            results.append(error)
    return results


# --- Normalizing answers and database state -----------------------------------------------------

_IDS = re.compile(r"(?:alloc|op)-[0-9a-f]{28}")


class Labels:
    """Stable names for the ids a run made (random, so different in each run): an allocation
    is named after the request that made it, an operation after the first cancel to answer it."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def name(self, resource_id: str, label: str) -> str:
        return self.names.setdefault(resource_id, label)

    def of(self, resource_id: str) -> str:
        return self.names.get(resource_id, f"unlabelled {resource_id}")

    def text(self, text: str) -> str:
        """``text`` with every id in it replaced by its label."""
        return _IDS.sub(lambda match: self.of(match.group(0)), text)


def error_outcome(error: BaseException, labels: Labels) -> Outcome:
    if not isinstance(error, ApiError):
        return ("unexpected", repr(error))
    metadata = tuple(sorted((key, labels.text(value)) for key, value in error.metadata.items()))
    return (type(error).__name__, error.reason, labels.text(error.message), metadata)


def view_outcome(view: AllocationView, labels: Labels) -> Outcome:
    row = view.row
    return (labels.of(row.allocation_id), row.tenant_id, row.gpu_model, row.node_count, row.state, view.node_ids)


def create_outcomes(results: Sequence[Created | BaseException], labels: Labels) -> list[Outcome]:
    for index, result in enumerate(results):
        if isinstance(result, Created):
            labels.name(result.view.row.allocation_id, f"A{index}")
    return [
        ("ok", *view_outcome(r.view, labels), r.view.row.cancel_us, r.replayed)
        if isinstance(r, Created)
        else error_outcome(r, labels)
        for r in results
    ]


def cancel_outcomes(
    results: Sequence[tuple[Operation, AllocationView] | BaseException], labels: Labels
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for index, result in enumerate(results):
        if isinstance(result, BaseException):
            outcomes.append(error_outcome(result, labels))
            continue
        operation, view = result
        outcomes.append(
            (
                "ok",
                labels.name(operation.operation_id, f"O{index}"),
                operation.tenant_id,
                operation.kind,
                labels.of(operation.target_id),
                operation.done,
                operation.done_us,
                *view_outcome(view, labels),
                view.row.cancel_us is not None,
            )
        )
    return outcomes


async def query(store: Database, sql: str) -> list[tuple[Any, ...]]:
    async with store.read() as session:
        result = await (await session.connection()).exec_driver_sql(sql)
        return [tuple(row) for row in result.all()]


@dataclass(frozen=True)
class Snapshot:
    """What a scenario leaves in the database, ids as labels, without timestamps."""

    allocations: list[Outcome]
    # Per allocation, its live nodes in position order.
    assignments: dict[str, tuple[str, ...]]
    nodes: dict[str, tuple[str, bool, bool]]
    # start usage events per (allocation, node).
    starts: dict[tuple[str, str], int]
    keys: list[Outcome]
    events: list[Outcome]
    operations: list[Outcome]


async def snapshot(store: Database, labels: Labels) -> Snapshot:
    allocations = await query(
        store, "SELECT allocation_id, tenant_id, gpu_model, node_count, state, cancel_us FROM allocations"
    )
    assignments: dict[str, list[str]] = {}
    for allocation_id, node_id, released in await query(
        store, "SELECT allocation_id, node_id, released_us FROM assignments ORDER BY allocation_id, position"
    ):
        assert released is None
        assignments.setdefault(labels.of(allocation_id), []).append(node_id)
    nodes = await query(store, "SELECT node_id, state, cordoned, drain_pending FROM nodes")
    starts = await query(
        store,
        "SELECT allocation_id, node_id, count(*), count(DISTINCT gpu_uuid) FROM usage_events WHERE kind = 'start'"
        " GROUP BY allocation_id, node_id",
    )
    for _, node_id, count, distinct in starts:
        assert count == distinct, f"a GPU of {node_id} has more than one start event"
    keys = await query(store, "SELECT tenant_id, method, request_id, result_id FROM idempotency_keys")
    events = await query(store, "SELECT node_id, event, from_state, to_state, reason, actor FROM node_events")
    operations = await query(store, "SELECT operation_id, tenant_id, kind, target_id, done, done_us FROM operations")
    return Snapshot(
        allocations=sorted((labels.of(a), t, m, n, s, c is not None) for a, t, m, n, s, c in allocations),
        assignments={label: tuple(ids) for label, ids in assignments.items()},
        nodes={node_id: (state, bool(cordoned), bool(drain)) for node_id, state, cordoned, drain in nodes},
        starts={(labels.of(a), node_id): count for a, node_id, count, _ in starts},
        keys=sorted((t, m, r, labels.of(result)) for t, m, r, result in keys),
        events=sorted((n, e, f, t, labels.text(reason), actor) for n, e, f, t, reason, actor in events),
        operations=sorted(
            (labels.of(o), t, k, labels.of(target), bool(done), d) for o, t, k, target, done, d in operations
        ),
    )


# --- Creates ------------------------------------------------------------------------------------


def create_scenario() -> list[AllocationRequest]:
    """Twelve creates on 10 H100 and 2 A100 nodes, every path of a create among them."""
    return [
        AllocationRequest("acme", H100, 1, "a-1"),  # 0: plain
        AllocationRequest("acme", H100, 2, "a-2"),  # 1: plain, two nodes
        AllocationRequest("globex", H100, 1, "g-1", actor="operator:tok-ops"),  # 2: an operator for globex
        AllocationRequest("acme", H100, 1, ""),  # 3: no request_id
        AllocationRequest("acme", H100, 1, "dup"),  # 4: plain
        AllocationRequest("acme", H100, 1, "dup"),  # 5: the same request again: replays 4
        AllocationRequest("acme", H100, 3, "a-2"),  # 6: a-2 with other fields: IDEMPOTENCY_KEY_REUSED
        AllocationRequest("ghost", H100, 1, "x-1"),  # 7: no such tenant
        AllocationRequest("globex", A100, 1, "g-a"),  # 8: another model
        AllocationRequest(
            "acme", H100, 6, "big", fail_if_unavailable=True
        ),  # 9: 6 wanted, 4 left: INSUFFICIENT_CAPACITY
        AllocationRequest("globex", H100, 3, "g-2"),  # 10: fits in the 4 left
        AllocationRequest("acme", H100, 1, "a-last"),  # 11: takes the last one
    ]


def create_calls(store: Database, requests: Iterable[AllocationRequest]) -> list[Callable[[], Awaitable[Created]]]:
    return [partial(commands.create, store, request) for request in requests]


def ok(label: str, tenant: str, model: str, nodes: tuple[str, ...], *, replayed: bool = False) -> Outcome:
    return ("ok", label, tenant, model, len(nodes), "ACTIVE", nodes, None, replayed)


# What the scenario answers one request at a time, in order, first fit in placement order.
EXPECTED_CREATES: list[Outcome] = [
    ok("A0", "acme", "H100", ("h01",)),
    ok("A1", "acme", "H100", ("h03", "h05")),
    ok("A2", "globex", "H100", ("h07",)),
    ok("A3", "acme", "H100", ("h09",)),
    ok("A4", "acme", "H100", ("h00",)),
    ok("A4", "acme", "H100", ("h00",), replayed=True),
    (
        "InvalidArgument",
        "IDEMPOTENCY_KEY_REUSED",
        "request_id: 'a-2' was already used for a different request; use a new request_id",
        (("fields", "request_id"),),
    ),
    ("NotFound", "TENANT_NOT_FOUND", "tenant 'ghost' not found", (("field", "tenant_id"), ("tenant_id", "ghost"))),
    ok("A8", "globex", "A100", ("a00",)),
    (
        "ResourceExhausted",
        "INSUFFICIENT_CAPACITY",
        "6 READY H100 node(s) requested, 4 free; nothing was allocated (fail_if_unavailable)",
        (
            ("free", "4"),
            ("gpu_model", "H100"),
            ("queued_ahead", "false"),
            ("requested", "6"),
            ("same_block", "false"),
            ("spares", "0"),
        ),
    ),
    ok("A10", "globex", "H100", ("h02", "h04", "h06")),
    ok("A11", "acme", "H100", ("h08",)),
]


async def run_creates(
    store: Database, *, at_once: bool, requests: Sequence[AllocationRequest] | None = None
) -> tuple[list[Outcome], Snapshot]:
    await build_fleet(store, h100=10, a100=2)
    calls = create_calls(store, create_scenario() if requests is None else requests)
    results = await (together(store, calls) if at_once else in_order(calls))
    labels = Labels()
    outcomes = create_outcomes(results, labels)
    return outcomes, await snapshot(store, labels)


def check_create_state(state: Snapshot) -> None:
    """The database the scenario must leave, whichever way it ran."""
    placed = {"A0", "A1", "A2", "A3", "A4", "A8", "A10", "A11"}
    assert {a[0] for a in state.allocations} == placed
    assert all(a[4] == "ACTIVE" for a in state.allocations)
    assert state.assignments == {
        "A0": ("h01",),
        "A1": ("h03", "h05"),
        "A2": ("h07",),
        "A3": ("h09",),
        "A4": ("h00",),
        "A8": ("a00",),
        "A10": ("h02", "h04", "h06"),
        "A11": ("h08",),
    }
    assert {n: s for n, (s, _, _) in state.nodes.items()} == {
        **{f"h{i:02d}": "ALLOCATED" for i in range(10)},
        "a00": "ALLOCATED",
        "a01": "READY",
    }
    assert state.starts == {
        (label, node): GPUS_PER_NODE for label, nodes in state.assignments.items() for node in nodes
    }
    assert state.keys == sorted(
        [
            ("acme", "CreateAllocation", "a-1", "A0"),
            ("acme", "CreateAllocation", "a-2", "A1"),
            ("globex", "CreateAllocation", "g-1", "A2"),
            ("acme", "CreateAllocation", "dup", "A4"),
            ("globex", "CreateAllocation", "g-a", "A8"),
            ("globex", "CreateAllocation", "g-2", "A10"),
            ("acme", "CreateAllocation", "a-last", "A11"),
        ]
    )
    allocate = [e for e in state.events if e[1] == "ALLOCATE"]
    actors = {"A2": "operator:tok-ops", "A8": "tenant:globex", "A10": "tenant:globex"}
    assert allocate == sorted(
        (node, "ALLOCATE", "READY", "ALLOCATED", label, actors.get(label, "tenant:acme"))
        for label, nodes in state.assignments.items()
        for node in nodes
    )


async def test_creates_one_at_a_time_answer_as_expected(store: Database) -> None:
    """The reference the set-based run is held to, on both databases: the scenario's creates,
    each alone, in order, give EXPECTED_CREATES (first fit, replay, reused key, unknown
    tenant, a refusal naming the free count, a smaller create fitting after it)."""
    outcomes, state = await run_creates(store, at_once=False)
    assert outcomes == EXPECTED_CREATES
    check_create_state(state)


async def test_creates_in_one_group_answer_as_they_would_one_at_a_time(store: Database, tmp_path: Path) -> None:
    """The twelve creates started together (one group, the plain ones in one set) answer
    each caller exactly as the same creates awaited in order on an identical fleet: same
    success or error (type, reason, message with its free count, metadata), same nodes in
    the same order, same replayed flag, the replay naming the allocation it replays."""
    if store._writer is None:
        pytest.skip(SQLITE_ONLY + "; concurrent creates on PostgreSQL run in parallel, in no set order")
    together_outcomes, _ = await run_creates(store, at_once=True)
    async with fresh_store(tmp_path, "in-order") as other:
        serial_outcomes, _ = await run_creates(other, at_once=False)
    assert serial_outcomes == EXPECTED_CREATES
    assert together_outcomes == serial_outcomes


async def test_creates_in_one_group_leave_the_database_they_would_one_at_a_time(
    store: Database, tmp_path: Path
) -> None:
    """The same scenario, comparing what it leaves: allocations, their nodes in position
    order, node states, 8 start usage events per node held, idempotency keys and node
    events (reason, actor), ids and timestamps aside."""
    if store._writer is None:
        pytest.skip(SQLITE_ONLY + "; concurrent creates on PostgreSQL run in parallel, in no set order")
    _, together_state = await run_creates(store, at_once=True)
    async with fresh_store(tmp_path, "in-order") as other:
        _, serial_state = await run_creates(other, at_once=False)
    check_create_state(serial_state)
    assert together_state == serial_state


async def test_a_key_refused_for_capacity_is_free_for_a_later_create_in_the_group(
    store: Database, tmp_path: Path
) -> None:
    """A create refused for capacity records no key, so a later create in the same group
    with that key but other fields is a new request and is placed where it stands, before
    the creates after it. The set passes over that later create (a duplicate key in the
    set) and runs it alone after the set: the nodes each caller gets must not change."""
    if store._writer is None:
        pytest.skip(SQLITE_ONLY + "; concurrent creates on PostgreSQL run in parallel, in no set order")
    requests = [
        AllocationRequest("acme", H100, 1, "k-1"),
        AllocationRequest(
            "acme", H100, 20, "retry", fail_if_unavailable=True
        ),  # more than the fleet: refused, records nothing
        AllocationRequest("acme", H100, 2, "retry"),  # same key, other fields: a new request, placed
        AllocationRequest("acme", H100, 1, "k-4"),
    ]
    together_outcomes, together_state = await run_creates(store, at_once=True, requests=requests)
    async with fresh_store(tmp_path, "in-order") as other:
        serial_outcomes, serial_state = await run_creates(other, at_once=False, requests=requests)
    assert [o[0] for o in serial_outcomes] == ["ok", "ResourceExhausted", "ok", "ok"]
    assert serial_outcomes[2][6] == ("h03", "h05")

    def picks(outcomes: list[Outcome]) -> list[object]:
        return [o[6] if o[0] == "ok" else o[0] for o in outcomes]

    assert picks(together_outcomes) == picks(serial_outcomes)
    assert together_outcomes == serial_outcomes
    assert together_state == serial_state


# --- Cancels ------------------------------------------------------------------------------------


# The allocations made before the cancels: (tenant, nodes).
CANCEL_SETUP = [
    ("acme", 1),  # c0
    ("acme", 2),  # c1: one of its nodes is drained before the cancel
    ("acme", 1),  # c2: cancelled by an operator
    ("globex", 1),  # c3
    ("globex", 2),  # c4
    ("acme", 1),  # c5
    ("globex", 1),  # c6: cancelled by an operator
    ("acme", 1),  # c7: only globex tries to cancel it: stays ACTIVE
    ("acme", 1),  # c8
]
# (who, which allocation): an index into CANCEL_SETUP, or an unknown id.
CANCELS: list[tuple[Principal, int | str]] = [
    (ACME, 0),
    (GLOBEX, 7),  # another tenant's: NOT_FOUND, and c7 is untouched
    (ACME, 1),
    (GLOBEX, 3),
    (OPERATOR, 2),
    (ACME, 0),  # again: the same Operation as the first
    (GLOBEX, 4),
    (ACME, "alloc-00000000000000000000000000ff"),  # no such allocation
    (ACME, 5),
    (OPERATOR, 6),
    (ACME, 8),
    (GLOBEX, 0),  # another tenant's, already cancelling: NOT_FOUND
]


async def run_cancels(store: Database, *, at_once: bool) -> tuple[list[Outcome], Snapshot]:
    await build_fleet(store, h100=12)
    labels = Labels()
    ids: list[str] = []
    for index, (tenant, count) in enumerate(CANCEL_SETUP):
        created = await commands.create(store, AllocationRequest(tenant, H100, count, f"setup-{index}"))
        labels.name(created.view.row.allocation_id, f"c{index}")
        ids.append(created.view.row.allocation_id)
    # c1's first node is drained while held: its release moves it DRAINING -> SCRUBBING.
    drained = (await commands.get(store, OPERATOR, ids[1])).node_ids[0]
    await node_commands.transition(store, CONTROL_PLANE, drained, NodeEvent.DRAIN, "bad fan")
    calls = [
        partial(commands.cancel, store, who, ids[which] if isinstance(which, int) else which) for who, which in CANCELS
    ]
    results = await (together(store, calls) if at_once else in_order(calls))
    outcomes = cancel_outcomes(results, labels)
    return outcomes, await snapshot(store, labels)


def check_cancel_outcomes(outcomes: list[Outcome], state: Snapshot) -> None:
    """What the cancels must answer and leave, whichever way they ran."""
    # The allocation each cancel of CANCELS accepts, None for NOT_FOUND.
    targets = ["c0", None, "c1", "c3", "c2", "c0", "c4", None, "c5", "c6", "c8", None]
    assert len(outcomes) == len(targets)
    for outcome, target in zip(outcomes, targets, strict=True):
        if target is None:
            assert outcome[:2] == ("NotFound", "ALLOCATION_NOT_FOUND"), outcome
            continue
        # (ok, operation, tenant, kind, target, done, done_us, view..., cancel time set)
        assert outcome[0] == "ok", outcome
        assert outcome[4] == target
        assert outcome[7] == target
        assert outcome[5:7] == (False, None), "the Operation is done before the release"
        assert outcome[11] == "CANCELLING"
        assert outcome[13] is True
        assert outcome[12] == state.assignments[target]
    assert outcomes[5][1] == outcomes[0][1], "a second cancel must answer the first one's Operation"
    allocation_states = {a[0]: (a[4], a[5]) for a in state.allocations}
    assert allocation_states == {
        **{f"c{i}": ("CANCELLING", True) for i in (0, 1, 2, 3, 4, 5, 6, 8)},
        "c7": ("ACTIVE", False),
    }
    scrubbing = {node for label, nodes in state.assignments.items() if label != "c7" for node in nodes}
    drained = state.assignments["c1"][0]
    for node_id, (node_state, cordoned, drain_pending) in state.nodes.items():
        if node_id in scrubbing:
            assert node_state == "SCRUBBING", node_id
            assert (cordoned, drain_pending) == ((True, True) if node_id == drained else (False, False))
        elif node_id in state.assignments["c7"]:
            assert node_state == "ALLOCATED"
        else:
            assert node_state == "READY"
    actors = {"c2": "operator:tok-ops", "c6": "operator:tok-ops", "c3": "tenant:globex", "c4": "tenant:globex"}
    releases = [e for e in state.events if e[1] == "RELEASE"]
    assert releases == sorted(
        (node, "RELEASE", "DRAINING" if node == drained else "ALLOCATED", "SCRUBBING", f"{label} cancelled", actor)
        for label, nodes in state.assignments.items()
        if label != "c7"
        for node in nodes
        for actor in [actors.get(label, "tenant:acme")]
    )
    assert sorted((o[2], o[3], o[4]) for o in state.operations) == sorted(
        ("cancel-allocation", f"c{i}", False) for i in (0, 1, 2, 3, 4, 5, 6, 8)
    )


async def test_cancels_together_answer_as_they_would_one_at_a_time(store: Database, tmp_path: Path) -> None:
    """Twelve cancels started together (on SQLite one group: the plain ones in one set)
    answer and leave what they do awaited in order on an identical fleet: a repeated cancel
    gets the first one's Operation, another tenant's and an unknown allocation are NOT_FOUND
    (the other tenant's stays ACTIVE), Operations are not done, allocations CANCELLING with a
    cancel time, nodes moved by the transition table (a drained one DRAINING -> SCRUBBING),
    each node event's actor the caller's. On PostgreSQL too: no cancel here depends on order."""
    together_outcomes, together_state = await run_cancels(store, at_once=True)
    async with fresh_store(tmp_path, "in-order") as other:
        serial_outcomes, serial_state = await run_cancels(other, at_once=False)
    check_cancel_outcomes(serial_outcomes, serial_state)
    assert together_outcomes == serial_outcomes
    assert together_state == serial_state


# --- Statements per group (SQLite) --------------------------------------------------------------


@dataclass
class StatementCount:
    """What the writer ran while counting: the transactions' statements (an executemany is
    one) and SQLite's executions as its trace callback sees them (one per executemany row,
    BEGIN and COMMIT included)."""

    statements: int = 0
    executions: int = 0


@asynccontextmanager
async def counting(store: Database, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[StatementCount]:
    writer = writer_of(store)
    connection = writer._connection
    assert connection is not None
    count = StatementCount()
    run = run_on_connection

    def counted(tx: Tx[T]) -> Tx[T]:
        try:
            statement: Sql = next(tx)
            while True:
                count.statements += 1
                rows = yield statement
                statement = tx.send(rows)
        except StopIteration as done:
            result: T = done.value
            return result
        finally:
            tx.close()

    def run_counted(connection: sqlite3.Connection, tx: Tx[T]) -> T:
        return run(connection, counted(tx))

    def traced(_: str) -> None:
        count.executions += 1

    monkeypatch.setattr(writer_module, "run_on_connection", run_counted)
    connection.set_trace_callback(traced)
    try:
        yield count
    finally:
        connection.set_trace_callback(None)
        monkeypatch.setattr(writer_module, "run_on_connection", run_on_connection)


async def test_sixteen_creates_and_cancels_in_a_group_run_few_statements(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 creates started together commit as one group and run a fixed handful of statements,
    far fewer than 16 creates alone would (a quarter at most); likewise 16 cancels."""
    if store._writer is None:
        pytest.skip(SQLITE_ONLY)
    await build_fleet(store, h100=17)
    writer = writer_of(store)
    async with counting(store, monkeypatch) as create_alone:
        first = await commands.create(store, AllocationRequest("acme", H100, 1, "alone"))
    requests = [AllocationRequest("acme", H100, 1, f"r-{i}") for i in range(16)]
    commits = writer.commits
    async with counting(store, monkeypatch) as creates:
        placed = await asyncio.gather(*(commands.create(store, r) for r in requests))
    assert writer.commits - commits == 1
    assert len({node for c in placed for node in c.view.node_ids}) == 16
    async with counting(store, monkeypatch) as cancel_alone:
        await commands.cancel(store, ACME, first.view.row.allocation_id)
    commits = writer.commits
    async with counting(store, monkeypatch) as cancels:
        await asyncio.gather(*(commands.cancel(store, ACME, c.view.row.allocation_id) for c in placed))
    assert writer.commits - commits == 1
    for name, alone, group in (("create", create_alone, creates), ("cancel", cancel_alone, cancels)):
        assert group.statements < 16 * alone.statements / 4, (name, alone, group)
        # executemany rows each count here, so the writes of every row remain: still half at most.
        assert group.executions < 16 * alone.executions / 2, (name, alone, group)


async def test_a_group_of_refused_creates_costs_little_more_than_the_creates_alone(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full cluster: every create of the group is refused. The runner, offered the group,
    takes nothing twice and is offered no more, so the group runs about the statements of
    its creates alone (a runner offer per create doubled them)."""
    if store._writer is None:
        pytest.skip(SQLITE_ONLY)
    await build_fleet(store, h100=1)
    await commands.create(store, AllocationRequest("acme", H100, 1, "fills-the-fleet"))
    async with counting(store, monkeypatch) as alone:
        with pytest.raises(ApiError):
            await commands.create(store, AllocationRequest("acme", H100, 1, "refused", fail_if_unavailable=True))
    requests = [AllocationRequest("acme", H100, 1, f"refused-{i}", fail_if_unavailable=True) for i in range(16)]
    async with counting(store, monkeypatch) as group:
        results = await together(store, [partial(commands.create, store, r) for r in requests])
    assert all(isinstance(r, ApiError) and r.reason == "INSUFFICIENT_CAPACITY" for r in results), results
    # Two offers of at most six reads each, on top of the sixteen creates alone.
    assert group.statements <= 16 * alone.statements + 12, (alone, group)


async def test_a_release_queued_between_creates_frees_nodes_for_the_creates_after_it(
    store: Database, tmp_path: Path
) -> None:
    """A transaction that is not set-based (here the releaser's) is a barrier: creates queued
    after it run after it, and get the nodes it released, as they would one at a time, not at
    the place of the first create of their set, before the release."""
    if store._writer is None:
        pytest.skip(SQLITE_ONLY)

    async def scenario(on: Database, at_once: bool) -> list[object]:
        await build_fleet(on, h100=2)
        held = await commands.create(on, AllocationRequest("acme", H100, 1, "held"))
        await commands.cancel(on, ACME, held.view.row.allocation_id)  # its node is scrubbing
        scrubbed = now_us() + 10**12  # every cancel's scrub counts as done
        calls: list[Callable[[], Awaitable[Any]]] = [
            partial(commands.create, on, AllocationRequest("acme", H100, 1, "before")),
            partial(on.transact, partial(release_batch, scrubbed_before_us=scrubbed, limit=64, locking=False)),
            partial(commands.create, on, AllocationRequest("acme", H100, 1, "after")),
        ]
        results = await (together(on, calls) if at_once else in_order(calls))
        # The creates' nodes, and how many allocations the release released.
        return [
            r.view.node_ids if isinstance(r, Created) else len(r[0]) if isinstance(r, tuple) else r for r in results
        ]

    grouped = await scenario(store, at_once=True)
    async with fresh_store(tmp_path, "in-order") as other:
        serial = await scenario(other, at_once=False)
    assert grouped == serial == [("h00",), 1, ("h01",)]


# --- A set that fails after writing (SQLite) --------------------------------------------------


async def test_a_batch_failing_after_its_writes_is_undone_and_each_runs_alone(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The set of creates fails after its last write (the usage events), having written the
    keys, allocations, assignments and node moves: the writer undoes the group and runs each
    create alone. Every caller still gets its allocation on nodes of its own, an unknown
    tenant still NOT_FOUND, and the database holds exactly those allocations, each node's 8
    start events once."""
    if store._writer is None:
        pytest.skip(SQLITE_ONLY)
    await build_fleet(store, h100=12)
    sets: list[int] = []

    def failing_record(
        placed: Sequence[tuple[PendingCreate, Sequence[str]]], *, now_us: int, claim_keys: bool
    ) -> Tx[list[Created]]:
        sets.append(len(placed))
        yield from record_creates(placed, now_us=now_us, claim_keys=claim_keys)
        raise RuntimeError("the set failed after writing")

    # Only the set's reference: the creates alone (commands.record_creates) record for real.
    monkeypatch.setattr(set_based, "record_creates", failing_record)
    requests = [AllocationRequest("acme" if i % 2 else "globex", H100, 1 + i % 2, f"f-{i}") for i in range(8)]
    requests.insert(3, AllocationRequest("ghost", H100, 1, "f-ghost"))
    writer = writer_of(store)
    commits = writer.commits
    results = await asyncio.gather(*(commands.create(store, r) for r in requests), return_exceptions=True)
    assert writer.commits - commits == 1
    # The set takes the three creates before the unknown tenant, fails, and is not tried
    # again: the second pass runs every create alone.
    assert sets == [3], "the set did not run (or ran again)"
    ghost = results.pop(3)
    assert isinstance(ghost, ApiError)
    assert ghost.reason == "TENANT_NOT_FOUND"
    created = [r for r in results if isinstance(r, Created)]
    assert len(created) == 8, results
    assert [c.view.row.node_count for c in created] == [r.node_count for r in requests if r.tenant_id != "ghost"]
    assert all(not c.replayed for c in created)
    nodes = [node for c in created for node in c.view.node_ids]
    assert len(nodes) == len(set(nodes)) == 12
    labels = Labels()
    for index, c in enumerate(created):
        labels.name(c.view.row.allocation_id, f"A{index}")
    state = await snapshot(store, labels)
    assert [a[0] for a in state.allocations] == sorted(f"A{i}" for i in range(8))
    assert state.assignments == {f"A{i}": c.view.node_ids for i, c in enumerate(created)}
    assert state.starts == {(f"A{i}", node): GPUS_PER_NODE for i, c in enumerate(created) for node in c.view.node_ids}
    assert len(state.keys) == 8
    assert {n: s for n, (s, _, _) in state.nodes.items()} == {f"h{i:02d}": "ALLOCATED" for i in range(12)}
    assert len([e for e in state.events if e[1] == "ALLOCATE"]) == 12


async def test_a_create_that_waits_queues_the_creates_of_its_model_behind_it(store: Database) -> None:
    """A create that does not fit waits PENDING, and the creates after it of its model and
    priority queue behind it though they would fit; one of a higher priority, or of another
    model, is placed: in one group on SQLite, one at a time on PostgreSQL (which has no groups)."""
    await build_fleet(store, h100=3, a100=1)
    requests = [
        AllocationRequest("acme", H100, 1, "first"),
        AllocationRequest("acme", H100, 3, "big"),
        AllocationRequest("acme", H100, 1, "after"),
        AllocationRequest("acme", H100, 1, "urgent", priority=1),
        AllocationRequest("globex", A100, 1, "other-model"),
    ]
    calls = create_calls(store, requests)
    results = await (together(store, calls) if store._writer is not None else in_order(calls))
    assert [r.view.row.state for r in results if not isinstance(r, BaseException)] == [
        "ACTIVE",
        "PENDING",
        "PENDING",
        "ACTIVE",
        "ACTIVE",
    ], results
    waiting = [r.view for r in results if not isinstance(r, BaseException) and r.view.row.state == "PENDING"]
    assert [(view.node_ids, view.row.admitted_us) for view in waiting] == [((), None), ((), None)]

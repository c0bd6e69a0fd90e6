"""``gpucloud tenants quota`` and ``tenants quotas``: an operator sets a tenant's quota of a GPU
model and lists quotas with the nodes each tenant holds; a tenant lists only its own and may not
set one; a create over the quota that asked not to wait is refused with QUOTA_EXCEEDED. And how
the tables show quotas, and an allocation preempted so that a lender could reclaim its quota."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from clients import models
from clients.cli import render
from tests.clients.cli.rendered import rendered, words
from tests.clients.cli.test_commands import connect, document
from tests.clients.cli.test_connection import gpucloud
from tests.conftest import RunningControlPlane, register_ready_nodes

SET = datetime(2026, 12, 1, 21, 33, 6, tzinfo=UTC)
PREEMPTED = (
    "preempted: tenant beta reclaims its H100 quota (1 node(s)), which tenant acme was borrowing:"
    " it held 2 H100 node(s) against a quota of 1"
)

# Tables ---------------------------------------------------------------------------------------


def _quota(tenant_id: str = "acme", **fields: Any) -> models.Quota:
    made = models.Quota(tenant_id, "H100", 4, 2, "lab", 1, "operator:tok-1", SET, used_gpu_milli=2500)
    return dataclasses.replace(made, **fields)


def _listed(output: str) -> Any:
    """The JSON list in a command's output; the in-process server's log lines share it."""
    lines = output.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip() in ("[", "[]"))
    parsed, _ = json.JSONDecoder().raw_decode("".join(lines[start:]))
    return parsed


def _flat(output: str) -> str:
    """The output without the tables' column borders, every run of spaces and line breaks as one
    space: a table's cells and captions fold."""
    return " ".join(output.replace("│", " ").split())


def test_the_quota_table_shows_each_quota_with_what_the_tenant_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    quotas = [
        _quota(),
        _quota("beta", gpu_model="A100", nodes=8, borrow_limit=0, cohort="", used_nodes=0, used_gpu_milli=0),
    ]
    text = rendered(monkeypatch, render.quotas_table(quotas))
    header = next(line for line in text.splitlines() if "TENANT" in line)
    assert words(header) == ["TENANT", "MODEL", "QUOTA", "BORROW", "LIMIT", "COHORT", "USED", "USED", "GPUS"]
    rows = [words(line) for line in text.splitlines() if "acme" in line or "beta" in line]
    # 2.5 GPUs of part-node work are one node's worth.
    assert rows == [["acme", "H100", "4", "2", "lab", "1", "2.5"], ["beta", "A100", "8", "0", "-", "0", "0"]]
    assert "borrowing" not in text


def test_a_tenant_holding_more_than_its_quota_is_said_to_borrow(monkeypatch: pytest.MonkeyPatch) -> None:
    text = rendered(monkeypatch, render.quotas_table([_quota(nodes=1, used_nodes=3)]))
    assert "USED over QUOTA: borrowing from its cohort" in _flat(text)


def test_no_quotas_says_that_tenants_are_then_unlimited(monkeypatch: pytest.MonkeyPatch) -> None:
    text = rendered(monkeypatch, render.quotas_table([]))
    assert "none: a tenant without a quota of a model is not limited" in text


def test_quota_json_has_every_field_and_the_time_in_utc(capsys: pytest.CaptureFixture[str]) -> None:
    render.print_json([_quota()])
    assert json.loads(capsys.readouterr().out) == [
        {
            "tenant_id": "acme",
            "gpu_model": "H100",
            "nodes": 4,
            "borrow_limit": 2,
            "cohort": "lab",
            "used_nodes": 1,
            "actor": "operator:tok-1",
            "update_time": "2026-12-01T21:33:06Z",
            "used_gpu_milli": 2500,
        }
    ]


def _allocation(allocation_id: str, state: str = "ACTIVE", **fields: Any) -> models.Allocation:
    made = models.Allocation(allocation_id, "acme", "H100", 2, state, ("h100-a-01",), SET, admit_time=SET)
    return dataclasses.replace(made, **fields)


def test_a_preempted_allocation_is_marked_and_the_caption_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    preempted = _allocation("alloc-p", "CANCELLED", preempted_reason=PREEMPTED)
    text = rendered(monkeypatch, render.allocations_table([preempted, _allocation("alloc-a")]), width=200)
    [row] = [words(line) for line in text.splitlines() if "alloc-p" in line and "│" in line]
    assert row[4:6] == ["CANCELLED", "(preempted)"]
    [other] = [words(line) for line in text.splitlines() if "alloc-a" in line and "│" in line]
    assert "(preempted)" not in other
    assert f"alloc-p: {PREEMPTED}" in _flat(text)


def test_allocations_none_preempted_say_nothing_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    text = rendered(monkeypatch, render.allocations_table([_allocation("alloc-a")]), width=200)
    assert "preempted" not in text


def test_explain_of_a_preempted_allocation_says_why_it_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    preempted = _allocation("alloc-p", "CANCELLED", preempted_reason=PREEMPTED)
    text = rendered(monkeypatch, render.explanation(models.AllocationExplanation(preempted)), width=300)
    assert text.strip() == (f"alloc-p is not pending: it is CANCELLED, admitted 2026-12-01 21:33:06 UTC; {PREEMPTED}")


def test_allocation_json_always_carries_preempted_reason(capsys: pytest.CaptureFixture[str]) -> None:
    render.print_json(_allocation("alloc-a"))
    assert json.loads(capsys.readouterr().out)["preempted_reason"] == ""


# Against a server -----------------------------------------------------------------------------


async def test_an_operator_sets_and_lists_quotas_and_a_tenant_sees_only_its_own(
    control_plane: RunningControlPlane,
) -> None:
    async with control_plane.client() as operator:
        await register_ready_nodes(operator, 3)
        acme = (await operator.create_tenant("acme")).token
        await operator.create_tenant("beta")
    quota = ["tenants", "quota", "acme", "H100", "2", "--borrow-limit", "1", "--cohort", "lab", "--json"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *quota)
    assert code == 0, output
    set_ = document(output)
    assert {k: set_[k] for k in ("tenant_id", "gpu_model", "nodes", "borrow_limit", "cohort", "used_nodes")} == {
        "tenant_id": "acme",
        "gpu_model": "H100",
        "nodes": 2,
        "borrow_limit": 1,
        "cohort": "lab",
        "used_nodes": 0,
    }
    assert set_["actor"].startswith("operator:")
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "tenants", "quota", "beta", "a100", "5")
    assert code == 0, output
    assert ["beta", "A100", "5", "0", "-", "0", "0"] in [words(line) for line in output.splitlines()]

    async with control_plane.client() as operator:
        # Held: ACTIVE allocations' nodes count.
        await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "tenants", "quotas")
    assert code == 0, output
    rows = [words(line) for line in output.splitlines() if "│" in line and "TENANT" not in line]
    assert rows == [["acme", "H100", "2", "1", "lab", "2", "16"], ["beta", "A100", "5", "0", "-", "0", "0"]]
    listing = ["tenants", "quotas", "beta", "--json"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *listing)
    assert code == 0, output
    assert [q["tenant_id"] for q in _listed(output)] == ["beta"]

    as_acme = ["--addr", control_plane.address, "--token", acme]
    code, output = await asyncio.to_thread(gpucloud, *as_acme, "tenants", "quotas", "--json")
    assert code == 0, output
    assert [(q["tenant_id"], q["used_nodes"], q["used_gpu_milli"]) for q in _listed(output)] == [("acme", 2, 16000)]
    code, output = await asyncio.to_thread(gpucloud, *as_acme, "tenants", "quotas", "beta", "--json")
    assert code == 0, output
    assert _listed(output) == []
    code, output = await asyncio.to_thread(gpucloud, *as_acme, "tenants", "quota", "acme", "H100", "100")
    assert code == 1, output
    assert "error PERMISSION_DENIED" in output


async def test_a_create_over_quota_that_would_not_wait_is_refused_with_the_figures(
    control_plane: RunningControlPlane,
) -> None:
    async with control_plane.client() as operator:
        await register_ready_nodes(operator, 3)
        await operator.create_tenant("acme")
        await operator.set_quota("acme", "H100", 1)
    create = ["allocations", "create", "--gpu-model", "H100", "--tenant", "acme", "--nodes", "2"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *create, "--fail-if-unavailable")
    assert code == 1, output
    assert "error RESOURCE_EXHAUSTED QUOTA_EXCEEDED" in output
    assert "tenant acme holds 0 of 1 H100 node(s); 2 more asked" in _flat(output)
    async with control_plane.client() as operator:
        assert len(await operator.list_allocations(tenant_id="acme")) == 0
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *create, "--json")
    assert code == 0, output
    waiting = document(output)
    explain = ["allocations", "explain", waiting["allocation_id"], "--json"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *explain)
    assert code == 0, output
    assert [r["kind"] for r in document(output)["reasons"]] == ["QUOTA_EXCEEDED"]


async def test_bad_quota_values_exit_2_naming_the_argument_or_option(control_plane: RunningControlPlane) -> None:
    async with control_plane.client() as operator:
        await operator.create_tenant("acme")
    quota = ["tenants", "quota", "acme", "H100", "100001", "--cohort", "Not A Cohort"]
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), *quota)
    assert code == 2, output
    assert "NODES: must be 0 to 100,000, not 100001" in output
    assert "--cohort: 'Not A Cohort' must be" in output
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "tenants", "quota", "acme", "H999", "1")
    assert code == 2, output
    assert "unknown GPU model 'H999'" in output
    code, output = await asyncio.to_thread(gpucloud, *connect(control_plane), "tenants", "quota", "nobody", "H100", "1")
    assert code == 1, output
    assert "error NOT_FOUND" in output

"""MetricsService end to end: a real server with its real tsdb, through the real client and CLI."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypedDict

import numpy as np
import pytest
from typer.testing import CliRunner

from clients import (
    AsyncClient,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    RetryPolicy,
    UnavailableError,
)
from clients.cli import render
from clients.cli.app import app
from clients.cli.metrics import summary_row
from clients.instants import from_ms
from clients.metrics import MetricsResult, NodeSamples, Series, SeriesSamples
from services.metrics import commands as metrics_commands
from services.metrics import samples as metrics_samples
from services.store.engine import Database
from services.tokens.commands import create_agent_token
from tests.conftest import RunningControlPlane, register_ready_nodes, running_control_plane
from tests.e2e.helpers import new_tenant

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def ms(moment: datetime | None) -> int:
    assert moment is not None
    return (moment - EPOCH) // timedelta(milliseconds=1)


def push(node_id: str, at_ms: int, value: float, *, gpus: int = 1) -> NodeSamples:
    """A push of power_w = value and temp_c = value / 10 for GPUs 0..gpus-1."""
    return NodeSamples(node_id, at_ms, {g: {"power_w": value + g, "temp_c": value / 10} for g in range(gpus)})


def only(result: MetricsResult) -> Series:
    assert len(result.series) == 1, [s.labels for s in result.series]
    return result.series[0]


async def settle() -> None:
    """Wait until the wall clock is a few ms past now, so samples stamped ``now - 3`` fall after
    every instant the server recorded before this call (the store's resolution is 1 ms)."""
    target = time.time_ns() + 6_000_000
    await asyncio.sleep(max(0, target - time.time_ns()) / 1e9)


class SeriesWindow(TypedDict):
    """query_metrics_range's arguments that pick the series and the span, for several steps."""

    start: int
    end: int
    node_ids: list[str]
    gpu_indexes: list[int]
    fields: list[str]


class StepsOfField(TypedDict):
    """query_metrics_range's arguments but the nodes, for one query put by several callers."""

    start: int
    end: int
    step: int
    aggregation: str
    fields: list[str]


# Round trip --------------------------------------------------------------------------------------


async def test_written_samples_read_back_raw_and_per_step_with_stats(operator: AsyncClient) -> None:
    """Ten pushes of two GPUs plus a labelled counter read back exactly, and per step as avg,
    max, count and rate; the stats count what was returned and read from the head."""
    await register_ready_nodes(operator, 1)
    base = (now_ms() // 10_000 - 12) * 10_000  # on a 10 s boundary, two minutes ago
    times = [base + i * 1000 for i in range(10)]
    counter = SeriesSamples({"node": "node-000", "field": "nic_rx_bytes"}, times, [100.0 * i for i in range(10)])
    written = await operator.write_samples(
        [push("node-000", t, 400.0 + i, gpus=2) for i, t in enumerate(times)], [counter]
    )
    assert (written.samples_written, written.series_written) == (10 * 2 * 2 + 10, 5)

    raw = await operator.query_metrics(
        start=base, end=base + 10_000, node_ids=["node-000"], gpu_indexes=[1], fields=["power_w"]
    )
    series = only(raw)
    assert series.labels == {"node": "node-000", "gpu": "1", "field": "power_w"}
    assert series.timestamps_ms.tolist() == times
    assert series.values.tolist() == [401.0 + i for i in range(10)]
    assert (raw.stats.series_returned, raw.stats.points_returned) == (1, 10)
    assert raw.stats.head_samples >= 10

    everything = await operator.query_metrics(start=base, end=base + 10_000, node_ids=["node-000"])
    assert len(everything.series) == 5
    assert everything.stats.points_returned == 50

    window: SeriesWindow = {
        "start": base,
        "end": base + 10_000,
        "node_ids": ["node-000"],
        "gpu_indexes": [0],
        "fields": ["power_w"],
    }
    avg = only(await operator.query_metrics_range(step=timedelta(seconds=5), aggregation="avg", **window))
    assert avg.timestamps_ms.tolist() == [base, base + 5000]
    assert avg.values.tolist() == [402.0, 407.0]
    peak = only(await operator.query_metrics_range(step=5000, aggregation="max", **window))
    assert peak.values.tolist() == [404.0, 409.0]
    counted = only(await operator.query_metrics_range(step=2500, aggregation="count", **window))
    assert counted.values.tolist() == [3.0, 2.0, 3.0, 2.0]
    rate = only(
        await operator.query_metrics_range(
            start=base, end=base + 10_000, step=10_000, aggregation="rate", fields=["nic_rx_bytes"]
        )
    )
    assert rate.values.tolist() == [pytest.approx(100.0)]  # 100 bytes a second


async def test_a_resent_batch_adds_nothing_and_a_repeated_time_with_another_value_is_refused(
    operator: AsyncClient,
) -> None:
    """A batch sent twice is a retry (no error, nothing new); the same time with a new value is out of order."""
    await register_ready_nodes(operator, 1)
    at = now_ms() - 1000
    assert (await operator.write_samples([push("node-000", at, 1.0)])).samples_written == 2
    assert (await operator.write_samples([push("node-000", at, 1.0)])).samples_written == 0
    with pytest.raises(InvalidArgumentError) as error:
        await operator.write_samples([push("node-000", at, 2.0)])
    assert error.value.reason == "SAMPLES_OUT_OF_ORDER"
    [(field, description)] = error.value.field_violations.items()
    # Whole: descriptions longer than 160 characters arrive cut short.
    assert description.endswith("nothing of the batch was written"), (field, description)
    stored = await operator.query_metrics(start=at, end=at + 1, fields=["power_w"])
    assert only(stored).values.tolist() == [1.0]


async def test_a_resent_batch_of_several_samples_a_series_adds_nothing(operator: AsyncClient) -> None:
    """A bulk import or an agent's buffered pushes resent after a lost reply: every sample but the
    last of each series is older than its newest by then, and is still a retry, not an error."""
    await register_ready_nodes(operator, 1)
    at = now_ms() - 10_000
    pushes = [push("node-000", at + i * 1000, float(i)) for i in range(3)]
    counter = SeriesSamples({"node": "node-000", "field": "nic_rx_bytes"}, [at, at + 1, at + 2], [1.0, 2.0, 3.0])
    assert (await operator.write_samples(pushes, [counter])).samples_written == 3 * 2 + 3
    assert (await operator.write_samples(pushes, [counter])).samples_written == 0
    assert (await operator.write_samples(pushes[:1])).samples_written == 0
    with pytest.raises(InvalidArgumentError) as error:
        await operator.write_samples([push("node-000", at + 1000, 9.0)])
    assert error.value.reason == "SAMPLES_OUT_OF_ORDER"
    stored = await operator.query_metrics(start=at, end=at + 3000, gpu_indexes=[0], fields=["power_w"])
    assert only(stored).values.tolist() == [0.0, 1.0, 2.0]


async def test_a_batch_resent_after_it_was_sealed_adds_nothing(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Once a maintenance pass has sealed a batch into segments, its resend is still a retry; a
    new value at a sealed time is still out of order."""
    await register_ready_nodes(operator, 1)
    hour = 3_600_000
    now = now_ms()
    batch = [push("node-000", now - 10 * hour + i, float(i), gpus=2) for i in range(3)]
    assert (await operator.write_samples([*batch, push("node-000", now, 0.0)])).samples_written == 3 * 4 + 2
    maintenance = control_plane.plane.metrics_maintenance
    assert maintenance is not None
    await maintenance.run_once()
    sealed = await operator.query_metrics(start=now - 11 * hour, end=now - 9 * hour)
    assert sealed.stats.head_samples == 0
    assert sealed.stats.points_returned == 12
    assert (await operator.write_samples(batch)).samples_written == 0
    with pytest.raises(InvalidArgumentError) as error:
        await operator.write_samples([push("node-000", now - 10 * hour + 1, 9.0)])
    assert error.value.reason == "SAMPLES_OUT_OF_ORDER"
    assert (await operator.query_metrics(start=now - 11 * hour, end=now - 9 * hour)).stats.points_returned == 12
    # A series never written is refused there too: the boundary is the store's, and says so.
    backfill = SeriesSamples({"node": "node-000", "field": "fan_rpm"}, [now - 10 * hour + 10], [1.0])
    with pytest.raises(InvalidArgumentError) as behind:
        await operator.write_samples([], [backfill])
    [(field, description)] = behind.value.field_violations.items()
    assert field == "series[0].timestamps_ms[0]"
    assert "where the store's sealed segments end" in description, description


async def test_stats_show_a_window_skipping_sealed_segments_outside_it(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Samples fourteen, ten and six hours ago seal into separate segments; a window around one of
    them opens one segment and skips the others."""
    await register_ready_nodes(operator, 1)
    hour = 3_600_000
    now = now_ms()
    old = [now - 14 * hour, now - 10 * hour, now - 6 * hour]
    await operator.write_samples([push("node-000", t, 1.0) for t in [*old, now]])
    # The head seals complete windows on append and on the maintenance pass: run one now.
    maintenance = control_plane.plane.metrics_maintenance
    assert maintenance is not None
    await maintenance.run_once()
    stats = (await operator.query_metrics(start=old[1] - 60_000, end=old[1] + 60_000)).stats
    assert stats.segments_total >= 3
    assert stats.segments_opened == 1
    assert stats.segments_skipped == stats.segments_total - 1
    assert stats.points_returned == 2
    assert stats.head_samples == 0
    assert stats.samples_decoded >= 2


async def test_the_maintenance_worker_deletes_segments_past_retention(tmp_path: Path, database_url: str) -> None:
    """With a 4 h retention, a maintenance pass two hours from now deletes the segments of samples
    3.9 and 3.5 hours old (sealed: their two-hour windows ended an hour before the newest sample)
    whole, while the recent sample stays readable."""
    hour = 3_600_000
    now = now_ms()
    times = [now - 39 * hour // 10, now - 35 * hour // 10, now - 1000]
    async with (
        running_control_plane(tmp_path / "data", database_url, metrics_retention_seconds=4 * 3600.0) as plane,
        plane.client() as operator,
    ):
        await register_ready_nodes(operator, 1)
        await operator.write_samples([push("node-000", t, 1.0) for t in times])
        maintenance = plane.plane.metrics_maintenance
        assert maintenance is not None
        await maintenance.run_once()  # the worker's pass, run now instead of waited for: keeps all
        assert (
            await operator.query_metrics(start=times[0], end=now + 1, fields=["power_w"])
        ).stats.points_returned == 3
        await maintenance.run_once(now_ms=now + 2 * hour)  # the pass two hours later
        result = await operator.query_metrics(start=times[0], end=now + 1, fields=["power_w"])
        assert only(result).timestamps_ms.tolist() == times[-1:]
        assert result.stats.segments_total == 0  # the files are gone, not just filtered out


async def test_samples_survive_a_restart(tmp_path: Path, database_url: str) -> None:
    """What a write acknowledged is read back after the control plane stops and starts again."""
    at = now_ms() - 5000
    async with running_control_plane(tmp_path / "data", database_url) as first, first.client() as operator:
        await register_ready_nodes(operator, 1)
        await operator.write_samples([push("node-000", at + i, float(i)) for i in range(3)])
    async with running_control_plane(tmp_path / "data", database_url) as second, second.client() as operator:
        result = await operator.query_metrics(start=at, end=at + 3, fields=["power_w"])
    assert only(result).values.tolist() == [0.0, 1.0, 2.0]


async def test_a_write_after_the_metrics_files_were_deleted_is_not_acknowledged(
    tmp_path: Path, database_url: str
) -> None:
    """The metrics directory removed under a running server (a wrong ``rm -rf``): the next write
    is not acknowledged into a log file nobody would read again but refused UNAVAILABLE
    STORAGE_ERROR, and so is every write after it, until the server is restarted."""
    at = now_ms() - 5000
    data_dir = tmp_path / "data"
    async with running_control_plane(data_dir, database_url) as plane:
        async with plane.client() as operator:
            await register_ready_nodes(operator, 1)
            await operator.write_samples([push("node-000", at, 1.0)])
        await asyncio.to_thread(shutil.rmtree, data_dir / "tsdb")
        once = AsyncClient(plane.address, plane.operator_token, timeout=10, retry=RetryPolicy(attempts=1))
        async with once as operator:
            for offset in (1, 2):
                with pytest.raises(UnavailableError) as refused:
                    await operator.write_samples([push("node-000", at + offset, 2.0)])
                assert refused.value.reason == "STORAGE_ERROR"


# Tenants -----------------------------------------------------------------------------------------


async def test_a_tenant_reads_its_node_only_for_the_time_it_held_it(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Samples before the allocation and after the release are absent for the tenant (raw and per
    step), the operator sees all of them, and another tenant gets NOT_FOUND for the node."""
    await register_ready_nodes(operator, 2)
    acme = await new_tenant(operator, control_plane, "acme")
    globex = await new_tenant(operator, control_plane, "globex")
    start = now_ms()
    before = [start - 3000 + i for i in range(3)]
    await operator.write_samples([push(n, t, 1.0) for t in before for n in ("node-000", "node-001")])

    async with acme, globex:
        allocation = await acme.create_allocation(gpu_model="H100", node_count=1)
        held, other = allocation.node_ids[0], ({"node-000", "node-001"} - set(allocation.node_ids)).pop()
        await settle()
        during = [now_ms() - 3 + i for i in range(3)]
        assert min(during) >= ms(allocation.admit_time)
        await operator.write_samples([push(n, t, 2.0 + i) for i, t in enumerate(during) for n in (held, other)])
        await settle()
        live = await acme.query_metrics(start=before[0], end=now_ms() + 1, node_ids=[held], fields=["power_w"])
        assert only(live).timestamps_ms.tolist() == during

        operation = await acme.cancel_allocation(allocation.allocation_id)
        done = await acme.wait_operation(operation.name, timeout=30)
        assert done.done
        assert done.allocation is not None
        await settle()
        after = [now_ms() - 3 + i for i in range(3)]
        assert min(after) >= ms(done.allocation.release_time)
        await operator.write_samples([push(n, t, 9.0) for t in after for n in (held, other)])
        end = now_ms() + 1

        seen = await acme.query_metrics(start=before[0], end=end, node_ids=[held])
        assert {s.field for s in seen.series} == {"power_w", "temp_c"}
        assert all(s.timestamps_ms.tolist() == during for s in seen.series)
        all_held = await acme.query_metrics(start=before[0], end=end)  # empty selector: every node it held
        assert {s.node_id for s in all_held.series} == {held}

        whole = only(
            await acme.query_metrics_range(
                start=before[0], end=end, step=end - before[0], aggregation="count", fields=["power_w"]
            )
        )
        assert whole.values.tolist() == [3.0]
        mean = only(
            await acme.query_metrics_range(
                start=before[0], end=end, step=end - before[0], aggregation="avg", fields=["power_w"]
            )
        )
        assert mean.values.tolist() == [pytest.approx(3.0)]  # 2, 3 and 4: none of the 1s before or 9s after
        fine = only(
            await acme.query_metrics_range(start=before[0], end=end, step=2, aggregation="sum", fields=["power_w"])
        )
        assert np.nansum(fine.values) == pytest.approx(9.0)
        # Steps cover the hold, from the placement to the release, and nothing outside it.
        held_from, held_to = ms(allocation.admit_time), ms(done.allocation.release_time)
        assert fine.timestamps_ms.min() >= held_from - 2
        assert fine.timestamps_ms.max() <= held_to
        assert fine.timestamps_ms[~np.isnan(fine.values)].tolist() == sorted({t - (t - before[0]) % 2 for t in during})

        everything = await operator.query_metrics(start=before[0], end=end, node_ids=[held], fields=["power_w"])
        assert only(everything).timestamps_ms.tolist() == before + during + after

        with pytest.raises(NotFoundError) as missing:
            await globex.query_metrics(start=before[0], end=end, node_ids=[held])
        assert missing.value.reason == "NODE_NOT_FOUND"
        assert missing.value.metadata["field"] == "selector.node_ids[0]"
        with pytest.raises(NotFoundError):
            await globex.query_metrics_range(start=before[0], end=end, step=1000, node_ids=[held])
        assert (await globex.query_metrics(start=before[0], end=end)).series == []
        with pytest.raises(NotFoundError):
            await acme.query_metrics(start=before[0], end=end, node_ids=[other])
        outside = await acme.query_metrics(start=before[0], end=during[0], node_ids=[held])
        assert outside.series == []


# Errors ------------------------------------------------------------------------------------------


async def test_an_out_of_order_write_names_the_field_and_writes_nothing(operator: AsyncClient) -> None:
    """A push older than the stored samples names nodes[i].timestamp_ms; a columnar series names
    its timestamp index; the good parts of a refused batch are not written either."""
    await register_ready_nodes(operator, 2)
    newest = now_ms() - 1000
    await operator.write_samples([push("node-000", newest, 1.0)])

    with pytest.raises(InvalidArgumentError) as error:
        await operator.write_samples([push("node-001", newest, 5.0), push("node-000", newest - 10, 5.0)])
    assert error.value.reason == "SAMPLES_OUT_OF_ORDER"
    assert list(error.value.field_violations) == ["nodes[1].timestamp_ms"]

    late = SeriesSamples({"node": "node-000", "gpu": "0", "field": "power_w"}, [newest - 5, newest + 5], [7.0, 8.0])
    with pytest.raises(InvalidArgumentError) as error:
        await operator.write_samples([push("node-001", newest + 1, 5.0)], [late])
    assert list(error.value.field_violations) == ["series[0].timestamps_ms[0]"]

    stored = await operator.query_metrics(start=newest - 100, end=newest + 100)
    assert {(s.node_id, tuple(s.timestamps_ms.tolist())) for s in stored.series} == {("node-000", (newest,))}


async def test_bad_writes_and_reads_are_invalid_argument_naming_each_field(operator: AsyncClient) -> None:
    """Malformed pushes, selectors, windows and steps name every bad field; unknown nodes are NOT_FOUND."""
    await register_ready_nodes(operator, 1)
    at = now_ms()
    with pytest.raises(InvalidArgumentError) as error:
        await operator.write_samples([NodeSamples("node-000", at, {0: {"power_w": math.nan}, 99: {"Bad": 1.0}})])
    assert set(error.value.field_violations) == {
        "nodes[0].gpus[0].fields['power_w']",
        "nodes[0].gpus[1].gpu_index",
        "nodes[0].gpus[1].fields['Bad']",
    }
    with pytest.raises(NotFoundError) as missing:
        await operator.write_samples([push("node-999", at, 1.0)])
    assert (missing.value.reason, missing.value.metadata["field"]) == ("NODE_NOT_FOUND", "nodes[0].node_id")

    with pytest.raises(InvalidArgumentError) as error:
        await operator.query_metrics(start=at, end=at - 1, node_ids=["Bad_Id"], gpu_indexes=[64], fields=["x-y"])
    assert set(error.value.field_violations) == {
        "selector.node_ids[0]",
        "selector.gpu_indexes[0]",
        "selector.fields[0]",
        "end_ms",
    }
    with pytest.raises(InvalidArgumentError) as error:
        await operator.query_metrics_range(start=0, end=at, step=1000)
    assert list(error.value.field_violations) == ["step_ms"]
    with pytest.raises(NotFoundError):
        await operator.query_metrics(start=at - 1000, end=at, node_ids=["node-404"])


async def test_a_thousand_bad_fields_get_a_short_invalid_argument(operator: AsyncClient) -> None:
    """The first ten violations, cut short, and the count: a full list would overflow gRPC's header
    limit and reach the client as a bare RESOURCE_EXHAUSTED."""
    await register_ready_nodes(operator, 1)
    at = now_ms()
    with pytest.raises(InvalidArgumentError) as error:
        await operator.query_metrics(start=at - 1000, end=at, node_ids=["BAD"] * 1000)
    assert list(error.value.field_violations) == [f"selector.node_ids[{i}]" for i in range(10)]
    assert error.value.metadata["violations"] == "1000"
    bad_key = "k" * 10_000
    with pytest.raises(InvalidArgumentError) as error:
        await operator.write_samples([NodeSamples("node-000", at, {g: {bad_key: 1.0} for g in range(8)})])
    assert len(error.value.field_violations) == 8
    assert all(len(path) <= 80 for path in error.value.field_violations)


async def test_a_raw_query_past_the_size_limit_is_resource_exhausted(
    operator: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More points than a response may carry is QUERY_TOO_LARGE, raw or per step."""
    monkeypatch.setattr(metrics_commands, "MAX_QUERY_POINTS", 5)
    await register_ready_nodes(operator, 1)
    at = now_ms() - 1000
    await operator.write_samples([push("node-000", at + i, 1.0) for i in range(3)])
    with pytest.raises(ResourceExhaustedError) as error:
        await operator.query_metrics(start=at, end=at + 3)
    assert error.value.reason == "QUERY_TOO_LARGE"
    assert len((await operator.query_metrics(start=at, end=at + 3, fields=["power_w"])).series) == 1
    with pytest.raises(ResourceExhaustedError):
        await operator.query_metrics_range(start=at, end=at + 3, step=1)
    assert len((await operator.query_metrics_range(start=at, end=at + 3, step=3)).series) == 2


async def test_a_query_far_past_the_limit_is_refused_before_it_is_built(
    operator: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's read stops at its own limits (four times a response's, here made small): a
    stepped query by series x steps before reading, a raw one once it has read past the limit."""
    monkeypatch.setattr(metrics_samples, "MAX_STEP_VALUES", 4)
    monkeypatch.setattr(metrics_samples, "MAX_SAMPLES_READ", 5)
    await register_ready_nodes(operator, 1)
    at = now_ms() - 1000
    await operator.write_samples([push("node-000", at + i, 1.0) for i in range(3)])  # 2 series x 3
    with pytest.raises(ResourceExhaustedError) as stepped:
        await operator.query_metrics_range(start=at, end=at + 3, step=1)
    assert stepped.value.reason == "QUERY_TOO_LARGE"
    assert "2 series x 3 steps" in str(stepped.value)
    assert stepped.value.metadata == {"matched": "6", "limit": "4"}
    assert len((await operator.query_metrics_range(start=at, end=at + 3, step=2)).series) == 2
    with pytest.raises(ResourceExhaustedError) as raw:
        await operator.query_metrics(start=at, end=at + 3)
    assert raw.value.metadata["limit"] == "5"
    assert len((await operator.query_metrics(start=at, end=at + 3, fields=["power_w"])).series) == 1


async def test_an_agent_writes_only_for_its_own_node_and_cannot_read(
    control_plane: RunningControlPlane, operator: AsyncClient, database_url: str
) -> None:
    """An agent token writes its node's samples; another node's are PERMISSION_DENIED, and reads too."""
    await register_ready_nodes(operator, 2)
    store = await Database.open(database_url)
    try:
        token = (await create_agent_token(store, "node-000")).plaintext
    finally:
        await store.close()
    at = now_ms() - 1000
    async with control_plane.client(token) as agent:
        assert (await agent.write_samples([push("node-000", at, 1.0)])).samples_written == 2
        with pytest.raises(PermissionDeniedError) as denied:
            await agent.write_samples([push("node-000", at + 1, 1.0), push("node-001", at + 1, 1.0)])
        assert denied.value.reason == "AGENT_NODE_MISMATCH"
        with pytest.raises(PermissionDeniedError):
            await agent.query_metrics(start=at, end=at + 1)


# CLI ---------------------------------------------------------------------------------------------


def test_the_query_table_counts_and_spans_only_the_steps_that_hold_a_value() -> None:
    """Empty steps (NaN) are neither points nor the span's ends; the JSON keeps them as null."""
    nan = math.nan
    series = Series(
        {"node": "node-000", "gpu": "0", "field": "power_w"},
        np.array([0, 60_000, 120_000, 180_000, 240_000], dtype=np.int64),
        np.array([nan, 400.0, nan, 410.0, nan]),
    )
    row = summary_row(series)
    assert row[3] == "2"
    assert (row[4], row[5]) == (render.when(from_ms(60_000)), render.when(from_ms(180_000)))
    assert row[6:] == ["400", "405", "410", "410"]


def run_cli(address: str, token: str, *args: str) -> tuple[int, str]:
    # As `gpucloud` sets it without a terminal (clients/cli/app.py::main), so tables are not squeezed.
    result = CliRunner().invoke(app, ["--addr", address, "--token", token, "metrics", *args], env={"COLUMNS": "160"})
    return result.exit_code, result.output


async def test_cli_query_prints_a_table_json_and_draws_a_png(
    control_plane: RunningControlPlane, operator: AsyncClient, tmp_path: Path
) -> None:
    """`gpucloud metrics query` renders a table, --json parses (NaN as null), --plot writes a PNG."""
    await register_ready_nodes(operator, 1)
    base = now_ms() - 60_000
    await operator.write_samples([push("node-000", base + i * 1000, 400.0 + i, gpus=2) for i in range(20)])
    start = datetime.fromtimestamp(base / 1000, UTC).isoformat().replace("+00:00", "Z")
    address, token = control_plane.address, control_plane.operator_token
    common = ["query", "--node", "node-000", "--field", "power_w", "--start", start, "--end", "now"]

    code, table = await asyncio.to_thread(run_cli, address, token, *common, "--gpu", "0")
    assert code == 0, table
    assert "node-000" in table
    assert "power_w" in table
    assert "419" in table
    assert "segments opened" in table

    code, text = await asyncio.to_thread(run_cli, address, token, *common, "--step", "5s", "--agg", "max", "--json")
    assert code == 0, text
    # The in-process server's log lines share stdout with the command; the document starts at "{".
    document, _ = json.JSONDecoder().raw_decode(text[text.index("{\n") :])
    assert {s["labels"]["gpu"] for s in document["series"]} == {"0", "1"}
    gpu0 = next(s for s in document["series"] if s["labels"]["gpu"] == "0")
    assert max(v for v in gpu0["values"] if v is not None) == 419.0
    assert None in gpu0["values"]  # the steps after the last sample have none
    assert document["stats"]["series_returned"] == 2
    # One fixed window for both calls: with "now" as the end, the second could hold more steps.
    fixed = [*common, "--end", datetime.fromtimestamp((base + 90_000) / 1000, UTC).isoformat(), "--step", "5s"]
    code, text = await asyncio.to_thread(run_cli, address, token, *fixed, "--agg", "max", "--json")
    assert code == 0, text
    steps, _ = json.JSONDecoder().raw_decode(text[text.index("{\n") :])
    empty = sum(v is None for s in steps["series"] for v in s["values"])
    assert empty > 0
    code, table = await asyncio.to_thread(run_cli, address, token, *fixed, "--agg", "max")
    assert code == 0, table
    # The caption's points include the steps without samples, and says how many those are.
    assert f"({empty} of them steps without samples)" in " ".join(table.split())

    chart = tmp_path / "power.png"
    code, text = await asyncio.to_thread(run_cli, address, token, *common, "--start", "-2m", "--plot", str(chart))
    assert code == 0, text
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert chart.stat().st_size > 5000

    code, text = await asyncio.to_thread(run_cli, address, token, "query", "--start", "yesterday")
    assert code == 2
    assert "RFC 3339" in text
    code, text = await asyncio.to_thread(
        run_cli, address, token, "write", "node-000", "--gpu", "3", "--set", "power_w=1"
    )
    assert code == 0
    assert "wrote 1 sample" in text


async def test_a_held_series_whose_steps_are_all_empty_reads_as_the_operator_reads_it(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """A rate over one sample is NaN: inside its hold, the tenant gets that series with its NaN
    step, as the operator does, instead of no series at all."""
    await register_ready_nodes(operator, 1)
    async with await new_tenant(operator, control_plane, "acme") as acme:
        allocation = await acme.create_allocation(gpu_model="H100", node_count=1)
        [node_id] = allocation.node_ids
        await settle()
        at = now_ms()
        await operator.write_samples([push(node_id, at, 5.0)])
        window: StepsOfField = {
            "start": at - 10,
            "end": at + 10,
            "step": 20,
            "aggregation": "rate",
            "fields": ["power_w"],
        }
        as_operator = only(await operator.query_metrics_range(node_ids=[node_id], **window))
        as_tenant = only(await acme.query_metrics_range(node_ids=[node_id], **window))
    assert np.isnan(as_operator.values).all()
    assert np.isnan(as_tenant.values).all()
    assert as_tenant.timestamps_ms.tolist() == as_operator.timestamps_ms.tolist() == [at - 10]

"""The metrics API's limits end to end: sample age and clock skew, series per node and in all,
answer size, and a refused write that leaves nothing behind. A real server, its real tsdb and
the real client."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from clients import AsyncClient, InvalidArgumentError, ResourceExhaustedError, RetryPolicy
from clients.async_client import DEFAULT_MAX_RECEIVE_BYTES
from clients.metrics import NodeSamples, SeriesSamples
from services.metrics import commands as metrics_commands
from tests.conftest import RunningControlPlane, register_ready_nodes, running_control_plane

DAY_MS = 86_400_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def push(node_id: str, at_ms: int, fields: dict[str, float], *, gpus: int = 1) -> NodeSamples:
    return NodeSamples(node_id, at_ms, {g: fields for g in range(gpus)})


def catalog_bytes(plane: RunningControlPlane) -> int:
    """The size of the metrics store's catalog: every series it ever registered, durably."""
    return (plane.config.data_dir / "tsdb" / "catalog.tsc").stat().st_size


# Sample age and clock skew -----------------------------------------------------------------------


async def test_a_sample_older_than_the_retention_is_refused_naming_the_field_and_the_unit(
    operator: AsyncClient,
) -> None:
    """45 days old against the default 30-day retention, or a time in seconds (1970 as
    milliseconds), would be accepted and deleted by the next maintenance pass: refused, naming
    the field, the retention and the unit. Nothing of the batch is written."""
    await register_ready_nodes(operator, 1)
    now = now_ms()
    old = push("node-000", now - 45 * DAY_MS, {"power_w": 1.0})
    with pytest.raises(InvalidArgumentError) as error:
        await operator.write_samples([push("node-000", now - 1000, {"temp_c": 2.0}), old])
    [(field, description)] = error.value.field_violations.items()
    assert field == "nodes[1].timestamp_ms"
    assert "45 days old" in description
    assert "30 days" in description
    assert "milliseconds" in description
    seconds = SeriesSamples({"node": "node-000", "field": "fan_rpm"}, [now // 1000, now - 2000], [1.0, 2.0])
    with pytest.raises(InvalidArgumentError) as in_seconds:
        await operator.write_samples([], [seconds])
    [(field, description)] = in_seconds.value.field_violations.items()
    assert field == "series[0].timestamps_ms[0]"
    assert "seconds" in description, description
    assert "milliseconds" in description, description
    stored = await operator.query_metrics(start=0, end=now + 1)
    assert stored.series == []


async def test_a_time_in_microseconds_is_refused_as_the_future_naming_the_unit(operator: AsyncClient) -> None:
    """A time far ahead of the server's clock names the unit it looks like."""
    await register_ready_nodes(operator, 1)
    with pytest.raises(InvalidArgumentError) as error:
        await operator.write_samples([push("node-000", now_ms() * 1000, {"power_w": 1.0})])
    [(field, description)] = error.value.field_violations.items()
    assert field == "nodes[0].timestamp_ms"
    assert "microseconds" in description, description
    assert "milliseconds" in description, description


async def test_a_sample_inside_the_retention_survives_the_maintenance_pass(tmp_path: Path, database_url: str) -> None:
    """With a 4 h retention, a sample 3 h old is accepted and a maintenance pass keeps it; one 5 h
    old is refused. A pass run 2 h later deletes the first, as retention promises."""
    hour = 3_600_000
    async with (
        running_control_plane(tmp_path / "data", database_url, metrics_retention_seconds=4 * 3600.0) as plane,
        plane.client() as operator,
    ):
        await register_ready_nodes(operator, 1)
        now = now_ms()
        with pytest.raises(InvalidArgumentError) as error:
            await operator.write_samples([push("node-000", now - 5 * hour, {"power_w": 1.0})])
        assert "4 hours" in error.value.field_violations["nodes[0].timestamp_ms"]
        written = await operator.write_samples([push("node-000", t, {"power_w": 1.0}) for t in (now - 3 * hour, now)])
        assert written.samples_written == 2
        maintenance = plane.plane.metrics_maintenance
        assert maintenance is not None
        await maintenance.run_once()
        kept = await operator.query_metrics(start=now - 4 * hour, end=now + 1)
        assert [s.timestamps_ms.tolist() for s in kept.series] == [[now - 3 * hour, now]]
        await maintenance.run_once(now_ms=now + 2 * hour)
        later = await operator.query_metrics(start=now - 4 * hour, end=now + 1)
        assert [s.timestamps_ms.tolist() for s in later.series] == [[now]]


async def test_nothing_accepted_is_deleted_by_the_next_maintenance_pass(tmp_path: Path, database_url: str) -> None:
    """A sample inside the retention, but within two maintenance intervals of its edge, would be
    deleted by the pass one interval later: refused. One just inside that margin is accepted and
    outlives the pass two intervals later."""
    hour, interval = 3_600_000, 60_000
    async with (
        running_control_plane(
            tmp_path / "data",
            database_url,
            metrics_retention_seconds=4 * 3600.0,
            metrics_maintenance_seconds=interval / 1000,
        ) as plane,
        plane.client() as op,
    ):
        await register_ready_nodes(op, 1)
        now = now_ms()
        edge = now - 4 * hour
        with pytest.raises(InvalidArgumentError) as error:
            await op.write_samples([push("node-000", edge + interval // 2, {"power_w": 1.0})])
        assert "4 hours less 2 minutes" in error.value.field_violations["nodes[0].timestamp_ms"]
        # 3 minutes inside the edge: past the margin even if the server's clock is a minute ahead.
        kept = edge + 3 * interval
        written = await op.write_samples([push("node-000", t, {"power_w": 1.0}) for t in (kept, now)])
        assert written.samples_written == 2
        maintenance = plane.plane.metrics_maintenance
        assert maintenance is not None
        await maintenance.run_once(now_ms=now + 2 * interval)
        result = await op.query_metrics(start=edge, end=now + 1)
        assert [s.timestamps_ms.tolist() for s in result.series] == [[kept, now]]
        assert result.stats.segments_total == 1  # sealed by the pass, and kept by it


# A refused write changes nothing -----------------------------------------------------------------


async def test_a_write_refused_for_order_registers_none_of_its_series(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """1,000 new series and one sample older than its series' newest: refused, and none of the
    1,000 series is registered: the catalog file does not grow by a byte."""
    await register_ready_nodes(operator, 1)
    now = now_ms()
    await operator.write_samples([push("node-000", now - 1000, {"power_w": 1.0})])
    before = catalog_bytes(control_plane)
    fresh = [SeriesSamples({"node": "node-000", "field": f"f{i}"}, [now - 500], [1.0]) for i in range(1000)]
    late = push("node-000", now - 2000, {"power_w": 9.0})
    with pytest.raises(InvalidArgumentError) as error:
        await operator.write_samples([late], fresh)
    assert error.value.reason == "SAMPLES_OUT_OF_ORDER"
    assert list(error.value.field_violations) == ["nodes[0].timestamp_ms"]
    assert catalog_bytes(control_plane) == before
    stored = await operator.query_metrics(start=now - 5000, end=now + 1)
    assert [s.field for s in stored.series] == ["power_w"]


async def test_a_new_series_behind_the_sealed_boundary_registers_nothing(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Once a pass has sealed the store up to near now, a batch whose new series reach behind that
    boundary is refused for them, and registers none of its series."""
    await register_ready_nodes(operator, 1)
    hour = 3_600_000
    now = now_ms()
    await operator.write_samples([push("node-000", t, {"power_w": 1.0}) for t in (now - 10 * hour, now)])
    maintenance = control_plane.plane.metrics_maintenance
    assert maintenance is not None
    await maintenance.run_once()
    before = catalog_bytes(control_plane)
    backfill = SeriesSamples({"node": "node-000", "field": "fan_rpm"}, [now - 10 * hour + 5], [1.0])
    fresh = SeriesSamples({"node": "node-000", "field": "nic_rx"}, [now - 10], [1.0])
    with pytest.raises(InvalidArgumentError) as error:
        await operator.write_samples([], [fresh, backfill])
    assert error.value.reason == "SAMPLES_OUT_OF_ORDER"
    [(field, description)] = error.value.field_violations.items()
    assert field == "series[1].timestamps_ms[0]"
    assert "sealed segments end" in description
    assert catalog_bytes(control_plane) == before


async def test_new_series_with_a_resent_batch_are_written_once(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """A batch resending stored samples (a retry) together with new series is accepted: the repeats
    add nothing, the new series are written, and a second resend adds nothing at all."""
    await register_ready_nodes(operator, 1)
    now = now_ms()
    first = [push("node-000", now - 3000 + i, {"power_w": float(i)}) for i in range(3)]
    assert (await operator.write_samples(first)).samples_written == 3
    fresh = SeriesSamples({"node": "node-000", "field": "fan_rpm"}, [now - 2000, now - 1000], [1.0, 2.0])
    assert (await operator.write_samples(first, [fresh])).samples_written == 2
    assert (await operator.write_samples(first, [fresh])).samples_written == 0
    stored = await operator.query_metrics(start=now - 5000, end=now + 1)
    assert sorted((s.field, len(s.timestamps_ms)) for s in stored.series) == [("fan_rpm", 2), ("power_w", 3)]


# Series limits -----------------------------------------------------------------------------------


async def test_series_past_the_per_node_and_total_limits_are_refused_and_not_registered(
    tmp_path: Path, database_url: str
) -> None:
    """Four series per node and six in all: a fifth on a node, or a seventh in all, is
    RESOURCE_EXHAUSTED SERIES_LIMIT_EXCEEDED with the numbers; nothing of the batch is written
    or registered, series already held keep taking samples, and the count survives a restart."""
    data_dir = tmp_path / "data"
    now = now_ms()
    async with (
        running_control_plane(data_dir, database_url, metrics_max_series_per_node=4, metrics_max_series=6) as plane,
        plane.client() as operator,
    ):
        await register_ready_nodes(operator, 3)
        both = {"power_w": 1.0, "temp_c": 2.0}
        assert (await operator.write_samples([push("node-000", now - 100, both, gpus=2)])).series_written == 4
        before = catalog_bytes(plane)
        with pytest.raises(ResourceExhaustedError) as per_node:
            await operator.write_samples([push("node-000", now - 90, {**both, "util_pct": 3.0}, gpus=2)])
        assert per_node.value.reason == "SERIES_LIMIT_EXCEEDED"
        assert per_node.value.metadata == {
            "limit_scope": "node",
            "node_id": "node-000",
            "field": "nodes[0].node_id",
            "series": "4",
            "new_series": "2",
            "limit": "4",
        }
        assert "node-000" in str(per_node.value)
        assert "4" in str(per_node.value)
        assert catalog_bytes(plane) == before
        assert (await operator.write_samples([push("node-000", now - 80, both, gpus=2)])).samples_written == 4
        assert (await operator.write_samples([push("node-001", now - 80, both)])).series_written == 2
        grown = catalog_bytes(plane)
        with pytest.raises(ResourceExhaustedError) as total:
            await operator.write_samples([push("node-002", now - 80, {"power_w": 1.0})])
        assert total.value.reason == "SERIES_LIMIT_EXCEEDED"
        assert total.value.metadata == {"limit_scope": "store", "series": "6", "new_series": "1", "limit": "6"}
        assert catalog_bytes(plane) == grown
    async with (
        running_control_plane(data_dir, database_url, metrics_max_series_per_node=4, metrics_max_series=6) as plane,
        plane.client() as operator,
    ):
        with pytest.raises(ResourceExhaustedError) as again:
            await operator.write_samples([push("node-000", now - 70, {"fan_rpm": 1.0})])
        assert again.value.metadata["series"] == "4"
        assert catalog_bytes(plane) == grown
        assert (await operator.write_samples([push("node-001", now - 70, both)])).samples_written == 2
    assert before < grown  # node-001's two series, and nothing of the refused batches


# Answer size -------------------------------------------------------------------------------------


def _long_labelled(node_id: str, first: int, count: int, at_ms: int) -> list[SeriesSamples]:
    """``count`` one-point series whose six extra labels are 120 characters each (~800 bytes)."""
    pad = "x" * 116
    return [
        SeriesSamples(
            {"node": node_id, "field": "power_w", **{f"l{k}": f"{i:04d}{pad}" for k in range(6)}}, [at_ms], [1.0]
        )
        for i in range(first, first + count)
    ]


async def test_an_answer_over_four_mib_within_the_bounds_reaches_the_client(tmp_path: Path, database_url: str) -> None:
    """7,500 one-point series with long labels make an answer of about 6 MB, inside the 200,000-point
    cap: the client's receive limit matches the server's answer bound, so it arrives whole. A
    client whose limit is set lower refuses it, so the option is what lets it through."""
    at = now_ms() - 1000
    async with running_control_plane(tmp_path / "data", database_url, metrics_max_series_per_node=10_000) as plane:
        async with plane.client() as operator:
            await register_ready_nodes(operator, 1)
            for first in range(0, 7500, 2500):
                await operator.write_samples([], _long_labelled("node-000", first, 2500, at))
            result = await operator.query_metrics(start=at, end=at + 1)
            assert len(result.series) == 7500
            assert result.stats.points_returned == 7500
            stepped = await operator.query_metrics_range(start=at, end=at + 1, step=1, aggregation="last")
            assert len(stepped.series) == 7500
        small = AsyncClient(
            plane.address, plane.operator_token, timeout=15, retry=RetryPolicy(attempts=1), max_receive_bytes=4 << 20
        )
        async with small:
            with pytest.raises(ResourceExhaustedError) as refused:
                await small.query_metrics(start=at, end=at + 1)
            assert refused.value.reason == ""  # gRPC's own refusal, before any server code


async def test_an_answer_over_the_byte_bound_is_query_too_large_with_the_numbers(
    operator: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the answer's byte bound (made small here), raw and stepped queries are QUERY_TOO_LARGE
    with the estimated size and the bound; a narrower selector fits."""
    monkeypatch.setattr(metrics_commands, "MAX_ANSWER_BYTES", 50_000)
    await register_ready_nodes(operator, 2)
    at = now_ms() - 1000
    await operator.write_samples([], _long_labelled("node-000", 0, 100, at) + _long_labelled("node-001", 0, 10, at))
    for query in (
        operator.query_metrics(start=at, end=at + 1),
        operator.query_metrics_range(start=at, end=at + 1, step=1),
    ):
        with pytest.raises(ResourceExhaustedError) as error:
            await query
        assert error.value.reason == "QUERY_TOO_LARGE"
        assert error.value.metadata["limit_bytes"] == "50000"
        assert 80_000 < int(error.value.metadata["estimated_bytes"]) < 120_000
        assert "bytes" in str(error.value)
    assert len((await operator.query_metrics(start=at, end=at + 1, node_ids=["node-001"])).series) == 10


def test_the_clients_receive_limit_covers_the_servers_answer_bound() -> None:
    """The project's own client never refuses an answer the server is allowed to send."""
    assert DEFAULT_MAX_RECEIVE_BYTES >= metrics_commands.MAX_ANSWER_BYTES

"""The `gpucloud` command's credentials and start-up: which token wins, and one-line errors
(exit 2, no traceback) for a bad token file, a bad log option, a taken port, a dead database."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import signal
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from typer.testing import CliRunner

from clients import AsyncClient
from clients.cli.app import app
from clients.errors import GpucloudError
from services.heap import YOUNG_THRESHOLD
from tests.clients.cli.served import Served, environment
from tests.clients.scripted_server import Start
from tests.conftest import RunningControlPlane, gpucloud_command


def gpucloud(*args: str, env: Mapping[str, str | None] | None = None) -> tuple[int, str]:
    # GPUCLOUD_TOKEN is removed unless a test sets it: the developer's own shell must not leak in.
    result = CliRunner().invoke(app, list(args), env={"GPUCLOUD_TOKEN": None, "COLUMNS": "160", **(env or {})})
    return result.exit_code, result.output


async def test_a_token_file_on_the_command_line_wins_over_gpucloud_token(
    control_plane: RunningControlPlane, tmp_path: Path
) -> None:
    """A stale GPUCLOUD_TOKEN in the shell neither wins over --token-file nor over --token."""
    token_file = tmp_path / "operator.token"
    token_file.write_text(control_plane.operator_token + "\n")
    address = ["--addr", control_plane.address]
    stale = {"GPUCLOUD_TOKEN": "not-a-real-token"}

    code, output = await asyncio.to_thread(gpucloud, *address, "tenants", "list", "--json", env=stale)
    assert code == 1
    assert "INVALID_TOKEN" in output
    code, output = await asyncio.to_thread(
        gpucloud, *address, "--token-file", str(token_file), "tenants", "list", "--json", env=stale
    )
    assert code == 0, output
    # The in-process server's log lines share the output; the document starts at "{".
    assert json.loads(output[output.index("{\n") :]) == {"items": [], "next_page_token": ""}
    code, output = await asyncio.to_thread(
        gpucloud, *address, "--token", control_plane.operator_token, "tenants", "list", "--json", env=stale
    )
    assert code == 0, output


def test_both_token_flags_are_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "t"
    token_file.write_text("x")
    code, output = gpucloud("--token", "x", "--token-file", str(token_file), "tenants", "list")
    assert code == 2
    assert "not both" in output


def test_help_names_the_token_variable() -> None:
    code, output = gpucloud("--help")
    assert code == 0
    assert "GPUCLOUD_TOKEN" in output


def test_uncordon_takes_no_reason() -> None:
    """UncordonNode records no reason, so the command must not accept one and drop it."""
    code, output = gpucloud("nodes", "uncordon", "node-1", "--reason", "fixed")
    assert code == 2
    assert "No such option" in output
    assert gpucloud("nodes", "cordon", "--help")[1].count("--reason") == 1


def test_an_unreadable_token_file_is_one_line(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.token", tmp_path):
        code, output = gpucloud("--addr", "127.0.0.1:1", "--token-file", str(path), "tenants", "list")
        assert code == 2, output
        assert output.startswith(f"error: --token-file {path}: ")
        assert "Traceback" not in output


def test_an_empty_token_file_says_so(tmp_path: Path) -> None:
    """Not "no token; pass --token, ...": the user did pass one, and its file is what is wrong."""
    path = tmp_path / "empty.token"
    path.write_text("\n")
    code, output = gpucloud("--addr", "127.0.0.1:1", "--token-file", str(path), "tenants", "list")
    assert code == 2, output
    assert output.strip() == f"error: --token-file {path}: is empty"


def test_serve_refuses_an_unknown_log_level_or_format(tmp_path: Path) -> None:
    for option, value in (("--log-level", "loud"), ("--log-format", "xml")):
        code, output = gpucloud("serve", "--data-dir", str(tmp_path), option, value)
        assert code == 2, output
        assert value in output
        assert "Traceback" not in output
        assert not (tmp_path / "gpucloud.db").exists()


def test_serve_refuses_durations_that_are_not_finite_or_out_of_range(tmp_path: Path) -> None:
    """nan crashed with a ValueError, inf with an OverflowError, and -3600 was taken: each is
    one line naming the option, exit 2, before anything is opened."""
    cases = [("--scrub-seconds", v, "0-86400") for v in ("nan", "inf", "-3600", "86401")]
    cases += [("--grace-seconds", v, "0-3600") for v in ("-nan", "3601")]
    # Processes of their own, run side by side: a serve that is not refused configures logging
    # process-wide, and one that starts runs until the helper's timeout rather than forever.
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        results = list(
            pool.map(
                lambda case: serve("--data-dir", str(tmp_path / case[1]), "--listen", "127.0.0.1:0", *case[:2]),
                cases,
            )
        )
    for (option, value, bounds), (code, output) in zip(cases, results, strict=True):
        assert code == 2, (option, value, output)
        assert output.startswith(f"error: {option} "), (option, value, output)
        assert output.endswith(f": must be {bounds} seconds\n"), (option, value, output)
        assert output.count("\n") == 1, output
        assert "Traceback" not in output, output
        assert not (tmp_path / value).exists()


def serve(*args: str) -> tuple[int, str]:
    """``gpucloud serve`` as its own process: it configures logging process-wide, which must not
    outlive the call in this one."""
    done = subprocess.run(
        [*gpucloud_command(), "serve", *args], capture_output=True, text=True, timeout=60, env=environment()
    )
    return done.returncode, done.stdout + done.stderr


def served_json(data_dir: Path, *args: str) -> Served:
    """``gpucloud serve`` on ``data_dir`` with JSON log lines, as a process of its own."""
    return Served("--data-dir", str(data_dir), "--log-format", "json", *args)


def test_serve_tunes_its_collector_and_exits_cleanly_on_sigterm(tmp_path: Path) -> None:
    """The process that owns the server takes what startup built out of full collections and
    collects young objects in larger batches (services/heap.py), once it serves; SIGTERM then
    stops it with exit 0."""
    served = served_json(tmp_path, "--listen", "127.0.0.1:0")
    try:
        tuned = served.until_event("collector_tuned")
        assert isinstance(tuned["frozen_objects"], int)
        assert tuned["frozen_objects"] > 10_000
        assert tuned["young_threshold"] == YOUNG_THRESHOLD
        names = [event["event"] for event in served.events]
        assert names.index("control_plane_started") < names.index("collector_tuned")
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=60) == 0
    finally:
        served.close()


async def until_not_serving(address: str) -> None:
    """Wait until the server says NOT_SERVING or refuses new calls: its stop has begun."""
    async with grpc.aio.insecure_channel(address) as channel:
        # Watch streams the status as it changes, starting with the current one.
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=30)
        try:
            async for reply in watch:
                if reply.status != health_pb2.HealthCheckResponse.SERVING:
                    return
        except grpc.aio.AioRpcError as error:
            if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                return  # no longer taking calls, or cancelling them
            raise
    raise AssertionError("the server kept serving after the signal")


async def test_a_second_signal_stops_serve_without_waiting_for_the_drain(tmp_path: Path) -> None:
    """The first Ctrl-C drains (a WaitOperation in flight holds it for up to --grace-seconds);
    a second one ends the process at once, in one line and exit 130 (128 + SIGINT; a second
    SIGTERM exits 143)."""
    served = served_json(tmp_path, "--listen", "127.0.0.1:0", "--grace-seconds", "60", "--scrub-seconds", "600")
    try:
        started = await asyncio.to_thread(served.until_event, "control_plane_started")
        address = str(started["address"])
        await asyncio.to_thread(served.until_event, "collector_tuned")
        operator_token = (tmp_path / "operator.token").read_text().strip()
        async with AsyncClient(address, operator_token) as operator:
            gpus = [f"GPU-n1-{i}" for i in range(8)]
            await operator.register_node("n1", gpu_model="H100", gpu_uuids=gpus, zone="z", rack="r", leaf_switch="l")
            await operator.complete_burn_in("n1")
            tenant_token = (await operator.create_tenant("acme")).token
        async with AsyncClient(address, tenant_token) as tenant:
            allocation = await tenant.create_allocation(gpu_model="H100", node_count=1)
            operation = await tenant.cancel_allocation(allocation.allocation_id)
            # The scrub takes 600 s: this call stays in flight and the drain must wait for it.
            waiting = asyncio.create_task(tenant.wait_operation(operation.name, timeout=120))
            # A call sent after it on the same connection is answered: the wait has arrived.
            await tenant.get_operation(operation.name)
            served.process.send_signal(signal.SIGINT)
            await until_not_serving(address)
            assert served.process.poll() is None, "the drain did not wait for the call in flight"
            second_signal_at = asyncio.get_running_loop().time()
            served.process.send_signal(signal.SIGINT)
            assert await asyncio.to_thread(served.process.wait, 30) == 130
            assert asyncio.get_running_loop().time() - second_signal_at < 30
            output = served.rest()
            assert "error: interrupted again; stopped without draining" in output
            assert "Traceback" not in output
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError, GpucloudError):
                await waiting
    finally:
        served.close()


def test_serve_on_a_taken_port_says_so_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, output = serve("--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{port}")
    assert code == 2, output
    assert f"error: cannot listen on '127.0.0.1:{port}'" in output
    assert "Traceback" not in output


def test_serve_with_an_unreachable_database_says_so_in_one_line(tmp_path: Path) -> None:
    url = "postgresql+asyncpg://postgres:secret@127.0.0.1:1/nothing"
    code, output = serve("--data-dir", str(tmp_path), "--database-url", url)
    assert code == 2, output
    assert "error: cannot open the database postgresql+asyncpg://postgres:***@127.0.0.1:1/nothing" in output
    assert "secret" not in output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("garbage", "not a database URL"),
        ("mysql://root:secret@127.0.0.1/db", "'mysql' is not supported"),
        ("postgresql://postgres:secret@127.0.0.1:1/db", "'postgresql' is not supported"),
        ("sqlite:///tmp/x.db", "'sqlite' is not supported"),
        ("sqlite+aiosqlite://", "in-memory SQLite"),
    ],
)
def test_serve_with_a_database_url_it_cannot_use_says_so_in_one_line(tmp_path: Path, url: str, said: str) -> None:
    """Refused before any connection (these were tracebacks: a URL parse error, a missing driver),
    naming the forms that work and never echoing a password."""
    code, output = serve("--data-dir", str(tmp_path), "--database-url", url)
    assert code == 2, output
    assert f"error: unusable database URL: {said}" in output
    assert "postgresql+asyncpg://USER@HOST:PORT/DATABASE" in output or said == "in-memory SQLite"
    assert "secret" not in output
    assert "Traceback" not in output


def test_serve_on_a_file_that_is_not_a_database_says_so_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "gpucloud.db").write_bytes(b"not a database, " * 512)
    code, output = serve("--data-dir", str(tmp_path))
    assert code == 2, output
    database = f"sqlite+aiosqlite:///{tmp_path / 'gpucloud.db'}"
    assert f"error: cannot open the database {database}: file is not a database" in output
    assert "Traceback" not in output


def test_no_server_at_the_address_says_where_it_looked() -> None:
    code, output = gpucloud("--addr", "127.0.0.1:1", "--token", "x", "tenants", "list")
    assert code == 1
    assert "error UNAVAILABLE" in output
    assert "is a control plane serving at 127.0.0.1:1? (--addr or GPUCLOUD_ADDR)" in output


async def test_a_server_that_stays_unavailable_fails_the_command_after_six_tries(scripted: Start) -> None:
    """The command bounds its retries (clients/cli/context.py's CLI_RETRY): it used to retry
    UNAVAILABLE until the call's 30 s deadline, as the library's default policy does, so an
    unreachable server or a store that stays down held every command for 30 s."""
    seen: list[bytes] = []

    async def unavailable(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        seen.append(request)
        await context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: metrics store unavailable")
        return b""

    address = await scripted({"gpucloud.v1.NodeService/ListNodes": unavailable})
    code, output = await asyncio.to_thread(gpucloud, "--addr", address, "--token", "x", "nodes", "list")
    assert code == 1, output
    assert "error UNAVAILABLE" in output
    assert "metrics store unavailable" in output
    assert len(seen) == 6


async def test_bad_fields_are_listed_once(control_plane: RunningControlPlane) -> None:
    """Each bad field on a line of its own, not also repeated in a message line above."""
    code, output = await asyncio.to_thread(
        gpucloud,
        "--addr",
        control_plane.address,
        "--token",
        control_plane.operator_token,
        "tenants",
        "create",
        "Bad Id",
    )
    assert code == 2, output
    assert "error INVALID_ARGUMENT INVALID_FIELD:\n" in output
    assert output.lower().count("tenant_id") == 1


async def test_a_second_server_on_the_same_data_dir_says_so_in_one_line(control_plane: RunningControlPlane) -> None:
    """Refused before it opens the database: the metrics store's directory lock is taken first."""
    data_dir = control_plane.config.data_dir
    code, output = await asyncio.to_thread(serve, "--data-dir", str(data_dir), "--listen", "127.0.0.1:0")
    assert code == 2, output
    assert "is in use by another gpucloud server" in output
    assert "Traceback" not in output


def test_serve_refuses_a_bound_under_one_in_one_line(tmp_path: Path) -> None:
    """The bounds on calls and series reach the server, which refuses one that would refuse
    every call or every write, before it serves."""
    for option in ("--tenant-max-calls", "--agent-max-calls", "--metrics-max-series-per-node"):
        code, output = serve("--data-dir", str(tmp_path / option), "--listen", "127.0.0.1:0", option, "0")
        assert code == 2, (option, output)
        assert output.startswith("error: unusable "), output
        assert output.count("\n") == 1, output
        assert "Traceback" not in output


def test_serve_refuses_health_limits_and_placements_that_cannot_work_naming_the_option(tmp_path: Path) -> None:
    cases = [
        ("--health-removal-share", "1.5", "removal_share_per_hour (--health-removal-share) must be within 0-1"),
        ("--health-removals-per-hour", "-1", "removals_per_hour (--health-removals-per-hour) must be >= 0"),
        ("--health-removals-per-leaf", "-2", "removals_per_leaf_hour (--health-removals-per-leaf) must be >= 0"),
        ("--slow-gpu-k", "nan", "slow_gpu_k (--slow-gpu-k) must be a number > 0"),
        ("--placement", "H100=tightest", "no placement policy 'tightest' for H100; known are first-fit, best-fit"),
        ("--placement", "H100", "--placement 'H100': give MODEL=POLICY, as in H100=best-fit"),
    ]
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        results = list(
            pool.map(
                lambda case: serve("--data-dir", str(tmp_path / case[1]), "--listen", "127.0.0.1:0", *case[:2]),
                cases,
            )
        )
    for (option, value, message), (code, output) in zip(cases, results, strict=True):
        assert code == 2, (option, output)
        assert output.startswith(f"error: {message}"), output
        assert output.count("\n") == 1, output
        assert not (tmp_path / value).exists()

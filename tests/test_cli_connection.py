"""The `gpucloud` command's credentials and start-up: which token wins, and one-line errors
(exit 2, no traceback) for a bad token file, a bad log option, a taken port, a dead database."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import socket
import subprocess
import threading
from pathlib import Path

from typer.testing import CliRunner

from clients.cli.app import app
from tests.conftest import RunningControlPlane, gpucloud_command


def gpucloud(*args: str, env: dict[str, str | None] | None = None) -> tuple[int, str]:
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
    assert code == 1 and "INVALID_TOKEN" in output
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


def test_an_unreadable_token_file_is_one_line(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.token", tmp_path):
        code, output = gpucloud("--addr", "127.0.0.1:1", "--token-file", str(path), "tenants", "list")
        assert code == 2, output
        assert output.startswith(f"error: --token-file {path}: ")
        assert "Traceback" not in output


def test_serve_refuses_an_unknown_log_level_or_format(tmp_path: Path) -> None:
    for option, value in (("--log-level", "loud"), ("--log-format", "xml")):
        code, output = gpucloud("serve", "--data-dir", str(tmp_path), option, value)
        assert code == 2, output
        assert value in output and "Traceback" not in output
        assert not (tmp_path / "gpucloud.db").exists()


def serve(*args: str) -> tuple[int, str]:
    """``gpucloud serve`` as its own process: it configures logging process-wide, which must not
    outlive the call in this one."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLOUD_")}
    done = subprocess.run(
        [*gpucloud_command(), "serve", *args], capture_output=True, text=True, timeout=60, env=environment
    )
    return done.returncode, done.stdout + done.stderr


def test_serve_freezes_its_startup_heap_and_exits_cleanly_on_sigterm(tmp_path: Path) -> None:
    """The process that owns the server takes what startup built out of full collections
    (services/heap.py), once it serves; SIGTERM then stops it with exit 0."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLOUD_")}
    command = [*gpucloud_command(), "serve", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0"]
    process = subprocess.Popen(
        [*command, "--log-format", "json"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment
    )
    assert process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    # A thread reads, so that a server that hangs without a word fails the test instead of CI.
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stdout or ()], daemon=True)
    reader.start()
    try:
        events: list[str] = []
        while "startup_heap_frozen" not in events:
            try:
                line = lines.get(timeout=60)
            except queue.Empty:
                raise AssertionError(f"no startup_heap_frozen line in 60 s; saw {events}") from None
            if line.startswith("{"):
                event = json.loads(line)
                events.append(event["event"])
                if event["event"] == "startup_heap_frozen":
                    assert isinstance(event["objects"], int) and event["objects"] > 10_000
        assert events.index("control_plane_started") < events.index("startup_heap_frozen")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join(timeout=10)  # at end of output once the process is gone
        process.stdout.close()


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
    assert "secret" not in output and "Traceback" not in output


def test_no_server_at_the_address_says_where_it_looked() -> None:
    code, output = gpucloud("--addr", "127.0.0.1:1", "--token", "x", "tenants", "list")
    assert code == 1
    assert "error UNAVAILABLE" in output
    assert "is a control plane serving at 127.0.0.1:1? (--addr or GPUCLOUD_ADDR)" in output


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
    assert code == 1, output
    assert "error INVALID_ARGUMENT INVALID_FIELD:\n" in output
    assert output.count("tenant_id") == 1


async def test_a_second_server_on_the_same_data_dir_says_so_in_one_line(control_plane: RunningControlPlane) -> None:
    """Refused before it opens the database: the metrics store's directory lock is taken first."""
    data_dir = control_plane.config.data_dir
    code, output = await asyncio.to_thread(serve, "--data-dir", str(data_dir), "--listen", "127.0.0.1:0")
    assert code == 2, output
    assert "is in use by another gpucloud server" in output
    assert "Traceback" not in output

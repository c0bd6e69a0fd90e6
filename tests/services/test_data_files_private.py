"""The data directory and the files the control plane keeps in it (the SQLite database and its
-wal and -shm, the operator token) are its owner's alone whatever the umask: the directory 0700,
the files 0600. A data directory that is already open to other users, and holds something, is
refused: what it holds may already have been read, and its mode is the operator's to change. A
file the server keeps that is there already, open to group or others, is narrowed with a warning."""

from __future__ import annotations

import re
import sqlite3
import stat
from pathlib import Path

import pytest
import structlog
from sqlalchemy.engine import make_url

from services.server import ControlPlane, ServerConfig, StartError
from tests.clients.cli.test_connection import serve
from tests.conftest import gpucloud_command, running_control_plane


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_data_directory_and_the_default_database_are_private(tmp_path: Path, umask_022: None) -> None:
    """The default SQLite database: gpucloud.db, and the -wal and -shm SQLite makes beside it."""
    data_dir = tmp_path / "parent" / "data"
    async with running_control_plane(data_dir, "") as running:
        async with running.client() as operator:
            await operator.create_tenant("acme")  # a write: the -wal file has pages in it
        found = {path.name: mode(path) for path in data_dir.iterdir() if path.is_file()}
        assert found == {
            name: 0o600 for name in ("gpucloud.db", "gpucloud.db-wal", "gpucloud.db-shm", "operator.token")
        }
    assert mode(data_dir) == 0o700


async def test_a_data_directory_is_private_on_every_database(
    tmp_path: Path, database_url: str, umask_022: None
) -> None:
    """On PostgreSQL the data directory holds the operator token; a SQLite file named by its URL,
    outside the data directory, is made 0600 too."""
    data_dir = tmp_path / "data"
    async with running_control_plane(data_dir, database_url) as running:
        async with running.client() as operator:
            await operator.create_tenant("acme")
        assert mode(data_dir) == 0o700
        assert mode(data_dir / "operator.token") == 0o600
        url = make_url(database_url)
        if url.get_backend_name() == "sqlite":
            database = Path(url.database or "")
            for path in (
                database,
                database.with_name(database.name + "-wal"),
                database.with_name(database.name + "-shm"),
            ):
                assert mode(path) == 0o600, path


@pytest.mark.parametrize("open_mode", [0o755, 0o750, 0o711, 0o707, 0o770], ids=oct)
async def test_a_data_directory_others_may_use_is_refused(tmp_path: Path, open_mode: int) -> None:
    """Refused before anything is opened or written, saying which mode and what to do."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "notes.txt").write_text("the operator's\n")
    data_dir.chmod(open_mode)
    expected = rf"{re.escape(str(data_dir))} is open to other users \(mode 0{open_mode:o}\).*`chmod -R go= "
    with pytest.raises(StartError, match=expected):
        await ControlPlane(ServerConfig(data_dir=data_dir, listen="127.0.0.1:0")).start()
    assert sorted(p.name for p in data_dir.iterdir()) == ["notes.txt"]
    assert mode(data_dir) == open_mode


async def test_an_empty_directory_given_as_the_data_directory_is_made_private(tmp_path: Path, umask_022: None) -> None:
    """``mkdir data && gpucloud serve --data-dir data``: nothing in it could have been read yet."""
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    assert mode(data_dir) == 0o755
    async with running_control_plane(data_dir, ""):
        assert mode(data_dir) == 0o700


def test_gpucloud_serve_on_an_open_data_directory_exits_2_in_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "operator.token").write_text("gpc_0000000000000000_left-by-an-older-version\n")
    data_dir.chmod(0o755)
    assert gpucloud_command()
    code, output = serve("--data-dir", str(data_dir), "--listen", "127.0.0.1:0")
    assert code == 2, output
    assert output.startswith(f"error: {data_dir} is open to other users (mode 0755)"), output
    assert output.count("\n") == 1, output
    assert "Traceback" not in output, output


@pytest.mark.parametrize("where", ["beside-the-data-directory", "in-the-data-directory"])
async def test_a_database_others_may_read_is_narrowed_at_start_with_a_warning(
    tmp_path: Path, umask_022: None, where: str
) -> None:
    """A database file, -wal and -shm that group or others may read are made 0600 when the server
    opens them, and each one narrowed is logged: a SQLite URL may name a file outside the data
    directory, and a data directory made 0700 by hand keeps the modes of the files in it."""
    data_dir = tmp_path / "data"
    if where == "in-the-data-directory":
        database, database_url = data_dir / "gpucloud.db", ""
    else:
        database = tmp_path / "elsewhere" / "control.db"
        database.parent.mkdir()
        database_url = f"sqlite+aiosqlite:///{database}"
    async with running_control_plane(data_dir, database_url) as running, running.client() as operator:
        await operator.create_tenant("acme")
    siblings = [database.with_name(database.name + suffix) for suffix in ("-wal", "-shm")]
    # Another process has it open, so the -wal and -shm are there when the server starts.
    holder = sqlite3.connect(database)
    try:
        holder.execute("PRAGMA journal_mode=WAL")
        holder.execute("CREATE TABLE IF NOT EXISTS held (x)")
        for path in (database, *siblings):
            path.chmod(0o644)
        with structlog.testing.capture_logs() as logs:
            async with running_control_plane(data_dir, database_url) as running:
                async with running.client() as operator:
                    await operator.create_tenant("globex")
                assert {path.name: mode(path) for path in (database, *siblings)} == {
                    path.name: 0o600 for path in (database, *siblings)
                }
    finally:
        holder.close()
    narrowed = [entry for entry in logs if entry["event"] == "data_file_narrowed"]
    assert [(entry["log_level"], entry["path"], entry["mode"]) for entry in narrowed] == [
        ("warning", str(path), "0644") for path in (database, *siblings)
    ], logs


async def test_an_operator_token_others_may_read_is_narrowed_at_start_with_a_warning(
    tmp_path: Path, umask_022: None
) -> None:
    """The token file kept from the first start, in a data directory made 0700 by hand."""
    data_dir = tmp_path / "data"
    async with running_control_plane(data_dir, ""):
        pass
    token_file = data_dir / "operator.token"
    token_file.chmod(0o644)
    with structlog.testing.capture_logs() as logs:
        async with running_control_plane(data_dir, "", operator_token=token_file.read_text().strip()):
            assert mode(token_file) == 0o600
    narrowed = [entry for entry in logs if entry["event"] == "data_file_narrowed"]
    assert [(entry["path"], entry["mode"]) for entry in narrowed] == [(str(token_file), "0644")], logs


async def test_a_file_given_as_the_data_directory_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.write_text("not a directory\n")
    with pytest.raises(
        StartError, match=rf"cannot use {re.escape(str(data_dir))} as the data directory: Not a directory"
    ):
        await ControlPlane(ServerConfig(data_dir=data_dir, listen="127.0.0.1:0")).start()
    assert data_dir.read_text() == "not a directory\n"

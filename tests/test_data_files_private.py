"""The data directory and the files the control plane keeps in it (the SQLite database and its
-wal and -shm, the operator token) are its owner's alone whatever the umask: the directory 0700,
the files 0600. A data directory that is already open to other users, and holds something, is
refused: what it holds may already have been read, and its mode is the operator's to change."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from services.server import ControlPlane, ServerConfig, StartError
from tests.conftest import gpucloud_command, running_control_plane
from tests.test_cli_connection import serve


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
    assert output.count("\n") == 1 and "Traceback" not in output, output

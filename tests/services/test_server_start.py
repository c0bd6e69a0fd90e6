"""A control plane whose start fails closes what it had opened, so the same process can start
one again on the same data directory once the cause is fixed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from services.server import ControlPlane, ServerConfig, StartError


async def test_a_failed_start_releases_the_data_directory(tmp_path: Path) -> None:
    database = tmp_path / "gpucloud.db"
    database.write_bytes(b"not a database, " * 512)
    config = ServerConfig(data_dir=tmp_path, listen="127.0.0.1:0")
    with pytest.raises(StartError, match="file is not a database"):
        await ControlPlane(config).start()
    database.unlink()
    # The metrics store's directory lock is free again: this is not "in use by another server".
    plane = ControlPlane(config)
    await plane.start()
    try:
        assert plane.port
    finally:
        await plane.stop()


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "127.0.0.1", "127.0.0.1:http", ":50051"])
async def test_a_listen_address_without_a_valid_port_is_refused(tmp_path: Path, listen: str) -> None:
    """gRPC would serve 127.0.0.1:99999 on port 34463 (modulo 65536): refused before anything opens."""
    with pytest.raises(StartError, match="port 0-65535"):
        await ControlPlane(ServerConfig(data_dir=tmp_path / "data", listen=listen)).start()
    assert not (tmp_path / "data").exists()


async def test_a_data_directory_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for data_dir in (a_file, a_file / "below"):
        with pytest.raises(StartError, match=f"cannot use {data_dir} as the data directory"):
            await ControlPlane(ServerConfig(data_dir=data_dir, listen="127.0.0.1:0")).start()


async def test_a_start_that_cannot_listen_mints_no_operator_token(tmp_path: Path, database_url: str) -> None:
    """The port is taken: no operator token is written, so the start that can listen is the
    first start, mints it, and says where it is (``gpucloud serve`` prints that path)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = ServerConfig(data_dir=tmp_path, listen=f"127.0.0.1:{port}", database_url=database_url)
        with pytest.raises(StartError, match="cannot listen"):
            await ControlPlane(refused).start()
    assert not (tmp_path / "operator.token").exists()
    plane = ControlPlane(ServerConfig(data_dir=tmp_path, listen="127.0.0.1:0", database_url=database_url))
    await plane.start()
    try:
        assert plane.operator_token_created == tmp_path / "operator.token"
        assert plane.operator_token_created.read_text().startswith("gpc_")
    finally:
        await plane.stop()


async def test_a_data_directory_whose_database_was_deleted_is_refused(tmp_path: Path) -> None:
    """The lifecycle review deleted gpucloud.db under a server: the restart made an empty one and
    overwrote operator.token, beside the old metrics. Now the start refuses and touches nothing."""
    config = ServerConfig(data_dir=tmp_path, listen="127.0.0.1:0")
    plane = ControlPlane(config)
    await plane.start()
    await plane.stop()
    token = (tmp_path / "operator.token").read_text()
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"gpucloud.db{suffix}").unlink(missing_ok=True)
    with pytest.raises(StartError, match=r"has operator\.token but no gpucloud\.db: the database was deleted or moved"):
        await ControlPlane(config).start()
    assert not (tmp_path / "gpucloud.db").exists()
    assert (tmp_path / "operator.token").read_text() == token
    # Starting afresh is removing the token (and the old metrics) on purpose.
    (tmp_path / "operator.token").unlink()
    fresh = ControlPlane(config)
    await fresh.start()
    try:
        assert fresh.operator_token_created == tmp_path / "operator.token"
    finally:
        await fresh.stop()


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` read-only for this process: by its mode for a user; for root, whom modes do not
    stop, by the immutable flag (Linux, where CI runs as root)."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], check=False).returncode:
        pytest.skip("root on a file system without `chattr +i`: nothing here can make a file read-only for root")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


async def test_a_database_file_the_server_cannot_write_is_refused(tmp_path: Path) -> None:
    """SQLite opens a file it may not write read-only without a word, and in WAL mode even BEGIN
    IMMEDIATE succeeds on it: the server said SERVING and answered every write UNAVAILABLE
    (STORAGE_ERROR). Now the start refuses in one line, and starts once the file is writable."""
    config = ServerConfig(data_dir=tmp_path, listen="127.0.0.1:0")
    plane = ControlPlane(config)
    await plane.start()
    await plane.stop()
    refused = ControlPlane(config)
    with read_only(tmp_path / "gpucloud.db"):
        try:
            with pytest.raises(StartError, match=r"gpucloud\.db: the file is read-only for this server"):
                await refused.start()
        finally:
            await refused.stop()  # if it started after all, it must not hold the data directory
    again = ControlPlane(config)
    await again.start()
    await again.stop()

"""A control plane whose start fails closes what it had opened, so the same process can start
one again on the same data directory once the cause is fixed."""

from __future__ import annotations

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

"""``gpucloud demo``, the README's first command, runs its whole walkthrough and exits 0."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clients.cli.app import app


@pytest.mark.parametrize("columns", ["80", "160"])
def test_the_demo_walks_through_every_step_and_exits_0(tmp_path: Path, columns: str) -> None:
    result = CliRunner().invoke(
        app, ["demo", "--data-dir", str(tmp_path / "demo")], env={"COLUMNS": columns, "GPUCLOUD_TOKEN": None}
    )
    assert result.exit_code == 0, result.output
    output = result.output
    for step in range(1, 10):
        assert f"\n{step}. " in output or output.startswith(f"{step}. "), step
    assert "refused as expected: RESOURCE_EXHAUSTED INSUFFICIENT_CAPACITY" in output
    assert "Cancel done" in output and "CANCELLED" in output
    assert "Traceback" not in output and "…" not in output
    assert max(len(line) for line in output.splitlines()) <= int(columns)

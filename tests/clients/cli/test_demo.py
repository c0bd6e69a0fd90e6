"""``gpucloud demo``, the README's first command, runs its whole walkthrough and exits 0."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.clients.cli.served import environment
from tests.clients.cli.test_connection import gpucloud
from tests.conftest import gpucloud_command


@pytest.mark.parametrize("columns", ["80", "160"])
def test_the_demo_walks_through_every_step_and_exits_0(tmp_path: Path, columns: str) -> None:
    """As its own process: the demo configures logging process-wide, which must not outlive it here."""
    done = subprocess.run(
        [*gpucloud_command(), "demo", "--data-dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environment(), "COLUMNS": columns},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    for step in range(1, 11):
        assert f"\n{step}. " in output or output.startswith(f"{step}. "), step
    # The agents' burn-in decides: the slow node fails it with its figures, the others pass.
    flat = " ".join(output.split())
    # More than is free waits PENDING and says why; asked not to wait, it is refused.
    assert "PENDING" in output
    assert "WAITING_FOR_CAPACITY" in output
    assert "with fail_if_unavailable it is refused instead: RESOURCE_EXHAUSTED INSUFFICIENT_CAPACITY" in flat
    assert "cancelling the queued allocation is done at once: done=True, CANCELLED" in flat
    assert "FAIL_BURN_IN" in output
    assert "fleet median of" in flat
    assert "PASS_BURN_IN" in output
    # A GPU off the bus pulls its node from the allocation, with the evidence, and a spare replaces it.
    assert "REPAIR: xid:79 on GPU 3" in flat
    assert "spare for h100-a-02" in flat or "h100-a-02 -> " in flat
    # And the agents' scrub confirms the release.
    assert "the agent confirmed gpus_reset" in flat
    assert "the same allocation, replayed from its record (nothing new allocated)" in " ".join(output.split())
    assert "Cancels done" in output
    # Two GPUs of one node wait behind the queued gang, then go onto a node shared from then on.
    assert "BEHIND_GANGS" in output
    assert "The two GPUs, on a node now shared" in flat
    assert "whole GPU" in output
    assert "CANCELLED" in output
    assert "Traceback" not in output
    assert "…" not in output
    assert max(len(line) for line in output.splitlines()) <= int(columns)


@pytest.mark.parametrize("used", ["earlier-run", "a-file"])
def test_the_demo_refuses_a_data_dir_that_holds_something(tmp_path: Path, used: str) -> None:
    """An earlier run's data (its fleet is registered already) or a file: one line, exit 2,
    and what is there is left as it was."""
    target = tmp_path / "demo"
    if used == "a-file":
        target.write_text("not a directory")
    else:
        target.mkdir()
        (target / "gpucloud.db").write_text("earlier run")
    code, output = gpucloud("demo", "--data-dir", str(target))
    assert code == 2, output
    assert output.strip() == f"error: --data-dir {target}: must be a new or empty directory"
    kept = target.read_text() if used == "a-file" else (target / "gpucloud.db").read_text()
    assert kept == ("not a directory" if used == "a-file" else "earlier run")

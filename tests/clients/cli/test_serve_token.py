"""What ``gpucloud serve`` says about the operator token when it starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.cli.serve import announce_operator_token


def test_a_first_start_says_where_it_wrote_the_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    created = tmp_path / "operator.token"
    created.write_text("secret\n")
    announce_operator_token(created, created)
    said = " ".join(capsys.readouterr().err.split())
    assert f"created an operator token in {created}" in said
    assert f"export GPUCLOUD_TOKEN=$(cat {created})" in said


def test_a_restart_points_at_the_token_file_it_wrote_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "operator.token"
    path.write_text("secret\n")
    announce_operator_token(None, path)
    assert " ".join(capsys.readouterr().err.split()) == f"operator token: {path}"


def test_a_replica_says_its_data_directory_holds_no_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    announce_operator_token(None, tmp_path / "operator.token")
    said = " ".join(capsys.readouterr().err.split())
    assert said.startswith("operator token: none in this data directory")
    assert str(tmp_path) not in said  # no path to a file that is not there

"""The first operator token of a fresh database, written into the data directory."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from services.auth.repository import OPERATOR_TOKEN_FILE, bootstrap_operator
from services.store.engine import Database


async def test_the_token_file_is_private_even_where_an_old_one_was_readable(store: Database, tmp_path: Path) -> None:
    """A token file left from an earlier database, readable by everyone, is made owner-only
    before the new token is written into it."""
    old = tmp_path / OPERATOR_TOKEN_FILE
    old.write_text("an earlier database's token\n")
    old.chmod(0o644)
    written = await bootstrap_operator(store, tmp_path)
    assert written == old
    assert stat.S_IMODE(old.stat().st_mode) == 0o600
    assert old.read_text().startswith("gpc_")


async def test_a_database_with_an_operator_mints_no_second_token(store: Database, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    assert await bootstrap_operator(store, first) == first / OPERATOR_TOKEN_FILE
    assert await bootstrap_operator(store, second) is None
    assert not (second / OPERATOR_TOKEN_FILE).exists()


async def test_a_token_file_that_cannot_be_written_keeps_no_token(store: Database, tmp_path: Path) -> None:
    """The file is written inside the minting transaction: when it cannot be, no operator token
    is stored that nobody holds, and the next start mints one."""
    with pytest.raises(FileNotFoundError):
        await bootstrap_operator(store, tmp_path / "missing")
    assert await bootstrap_operator(store, tmp_path) == tmp_path / OPERATOR_TOKEN_FILE

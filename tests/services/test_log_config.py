"""Log configuration: our lines and libraries' standard-library lines come out alike."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from services.log_config import LogFormat, LogLevel, configure


@pytest.fixture
def restored() -> Iterator[None]:
    """configure() changes process-wide state: put it back for the tests after this one."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers, root.level = handlers, level
    structlog.reset_defaults()


def test_a_library_error_with_a_traceback_is_one_json_line(restored: None, capsys: pytest.CaptureFixture[str]) -> None:
    """What SQLAlchemy's pool logs on a failed reset reads as JSON, traceback included."""
    configure(LogLevel.INFO, LogFormat.JSON)
    try:
        raise RuntimeError("reset interrupted")
    except RuntimeError:
        logging.getLogger("sqlalchemy.pool.impl.AsyncAdaptedQueuePool").error("Exception during reset", exc_info=True)
    logging.getLogger("grpc").info("library chatter below WARNING is not shown")
    structlog.get_logger("gpucloud.test").info("ours", answer=42)
    lines = capsys.readouterr().err.splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["event"] for r in records] == ["Exception during reset", "ours"]
    library, ours = records
    assert library["level"] == "error"
    assert library["logger"] == "sqlalchemy.pool.impl.AsyncAdaptedQueuePool"
    assert library["exception"][0]["exc_type"] == "RuntimeError"
    assert ours["answer"] == 42
    assert "timestamp" in ours


def test_json_tracebacks_carry_no_local_variables(restored: None, capsys: pytest.CaptureFixture[str]) -> None:
    """A frame's locals can hold a bearer token: they must not reach the log."""
    configure(LogLevel.INFO, LogFormat.JSON)

    def authenticate(token: str) -> None:
        raise PermissionError("no")

    try:
        authenticate("secret-bearer-token")
    except PermissionError:
        structlog.get_logger("gpucloud.test").exception("failed")
    output = capsys.readouterr().err
    frames = json.loads(output)["exception"][0]["frames"]
    assert [f["name"] for f in frames][-1] == "authenticate"
    assert all("locals" not in f for f in frames)
    assert "secret-bearer-token" not in output


def test_configuring_twice_keeps_one_handler(restored: None) -> None:
    configure(LogLevel.WARNING, LogFormat.JSON)
    configure(LogLevel.INFO, LogFormat.CONSOLE)
    assert [h.get_name() for h in logging.getLogger().handlers].count("gpucloud") == 1


def test_an_unknown_level_or_format_is_refused(restored: None) -> None:
    with pytest.raises(ValueError, match="'loud' is not a valid LogLevel"):
        configure("loud", LogFormat.JSON)
    with pytest.raises(ValueError, match="'xml' is not a valid LogFormat"):
        configure(LogLevel.INFO, "xml")

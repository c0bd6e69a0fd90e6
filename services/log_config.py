"""structlog configuration: JSON lines in production, a readable console on a terminal."""

from __future__ import annotations

import logging
import sys
from enum import StrEnum

import structlog


class LogLevel(StrEnum):
    """The least severe level written."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class LogFormat(StrEnum):
    """JSON lines for machines, a readable console for people; auto picks console on a terminal."""

    JSON = "json"
    CONSOLE = "console"
    AUTO = "auto"


def configure(level: LogLevel | str = LogLevel.INFO, fmt: LogFormat | str = LogFormat.AUTO) -> None:
    """Configure structlog once, at process start, before any logger is used.

    Raises ValueError for a level or format not in ``LogLevel`` / ``LogFormat``.
    """
    level, fmt = LogLevel(level), LogFormat(fmt)
    if fmt is LogFormat.AUTO:
        fmt = LogFormat.CONSOLE if sys.stderr.isatty() else LogFormat.JSON
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if fmt is LogFormat.CONSOLE
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks if fmt is LogFormat.JSON else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.value.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )

"""structlog configuration: JSON lines in production, a readable console on a terminal."""

from __future__ import annotations

import logging
import sys
from enum import StrEnum

import structlog
from structlog.tracebacks import ExceptionDictTransformer


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


# Tracebacks never show each frame's local variables, in either format (structlog's defaults,
# its JSON tracebacks and the console's rich ones, show them): they would copy bearer tokens,
# request bodies and SQL parameters into the log.
_JSON_TRACEBACKS = structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False))
# The standard library's traceback: frames, source lines and the exception, no locals.
_CONSOLE_TRACEBACKS = structlog.dev.plain_traceback
_HANDLER_NAME = "gpucloud"


def configure(level: LogLevel | str = LogLevel.INFO, fmt: LogFormat | str = LogFormat.AUTO) -> None:
    """Configure structlog once, at process start, before any logger is used.

    Raises ValueError for a level or format not in ``LogLevel`` / ``LogFormat``.
    """
    level, fmt = LogLevel(level), LogFormat(fmt)
    if fmt is LogFormat.AUTO:
        fmt = LogFormat.CONSOLE if sys.stderr.isatty() else LogFormat.JSON
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), exception_formatter=_CONSOLE_TRACEBACKS)
        if fmt is LogFormat.CONSOLE
        else structlog.processors.JSONRenderer()
    )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    tracebacks = _JSON_TRACEBACKS if fmt is LogFormat.JSON else structlog.dev.set_exc_info
    numeric_level = logging.getLevelNamesMapping()[level.value.upper()]
    structlog.configure(
        processors=[*shared, tracebacks, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    _route_standard_logging(shared, tracebacks, renderer, max(numeric_level, logging.WARNING))


def _route_standard_logging(
    shared: list[structlog.types.Processor],
    tracebacks: structlog.types.Processor,
    renderer: structlog.types.Processor,
    level: int,
) -> None:
    """Render what libraries log through the standard library (SQLAlchemy's pool, grpc,
    asyncio) like our own lines, so a JSON log stays one JSON object per line. Libraries are
    heard from at WARNING and above whatever our level: their INFO is chatter."""
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, tracebacks, renderer],
        )
    )
    root = logging.getLogger()
    # Configuring twice (tests, an embedding program) replaces our handler, not others'.
    root.handlers = [h for h in root.handlers if h.get_name() != _HANDLER_NAME] + [handler]
    root.setLevel(level)

"""Logging set-up: structured events everywhere, rendered as JSON or console lines at the edge only.

Context bound with ``structlog.contextvars`` (marquee, cycle id, replica, fence, phase) is merged
into every line, so one cycle's lines can be followed in a journal without passing a logger around.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

LogFormat = Literal["json", "console", "auto"]


def configure_logging(
    log_format: LogFormat = "auto", level: str = "info", *, final: bool = False
) -> None:
    """Route structlog, stdlib logging of our libraries and Python's warnings to stderr in one
    format.

    ``final``: the process's last configuration (a daemon's, from its settings), so each logger
    is assembled once, on its first use, rather than on every call: a filtered debug line cost a
    whole logger's assembly each time (bench/README.md: cached loggers). Not for the
    configuration set before the settings are read, which a cached logger would keep.

    Tracebacks, in either format, keep file, line and code only: structlog's console default
    (rich) prints every frame's local variables, which hold the Redis password and registry
    credentials, so the plain formatter is chosen here and nowhere is a locals-showing one used.
    """
    if log_format == "auto":
        log_format = "console" if sys.stderr.isatty() else "json"
    renderer: structlog.typing.Processor = (
        # Fields in the order logged (the outcome of a cycle first), not sorted by name.
        structlog.dev.ConsoleRenderer(
            exception_formatter=structlog.dev.plain_traceback, sort_keys=False
        )
        if log_format == "console"
        else structlog.processors.JSONRenderer()
    )
    exceptions: structlog.typing.Processor = (
        structlog.processors.format_exc_info if log_format == "json" else structlog.dev.set_exc_info
    )
    stamped: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[*stamped, structlog.processors.StackInfoRenderer(), exceptions, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=final,
    )
    _route_stdlib_logging(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*stamped, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                exceptions,
                renderer,
            ],
        ),
        max(numeric_level, logging.WARNING),
    )


def _route_stdlib_logging(formatter: logging.Formatter, level: int) -> None:
    """Dependencies' own lines (OpenTelemetry's exporter with its collector down, asyncio's "task
    exception was never retrieved", Python's warnings) rendered as ours: one JSON object a line
    in the json format, with their message as ``event`` and their ``logger``. Replaces whatever
    handlers were there, so calling this again (the daemon's settings after the CLI's defaults)
    leaves one."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)

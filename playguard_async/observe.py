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


def configure_logging(log_format: LogFormat = "auto", level: str = "info") -> None:
    """Route structlog (and stdlib logging of our libraries) to stderr in one format."""
    if log_format == "auto":
        log_format = "console" if sys.stderr.isatty() else "json"
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer()
        if log_format == "console"
        else structlog.processors.JSONRenderer()
    )
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info
            if log_format == "json"
            else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=max(numeric_level, logging.WARNING), stream=sys.stderr, force=True)

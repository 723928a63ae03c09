"""Logging set-up: structured events everywhere, rendered as JSON or console lines at the edge only.

Context bound with ``structlog.contextvars`` (marquee, cycle id, replica, fence, phase) is merged
into every line, so one cycle's lines can be followed in a journal without passing a logger around.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Mapping
from typing import Any, Literal

import structlog
from redis.asyncio import Redis

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


def last_cycle_key(marquee: str) -> str:
    return f"playguard:cycles:{{{marquee}}}:last"


def cycle_history_key(marquee: str) -> str:
    return f"playguard:cycles:{{{marquee}}}:history"


class CycleRecords:
    """Each Marquee's last cycle and a bounded history of them, in Redis, for operators.

    What a cycle saw and did must not live only in a log line: ``playguard status`` and anyone with
    redis-cli can read it here. History is capped at ``history_length`` records per Marquee.
    """

    def __init__(self, redis: Redis, *, history_length: int, timeout: float) -> None:
        self.redis = redis
        self.history_length = history_length
        self.timeout = timeout

    async def record(self, marquee: str, record: Mapping[str, Any]) -> None:
        encoded = json.dumps(record, default=str, separators=(",", ":"))
        async with asyncio.timeout(self.timeout), self.redis.pipeline(transaction=True) as pipe:
            pipe.set(last_cycle_key(marquee), encoded)
            pipe.lpush(cycle_history_key(marquee), encoded)
            pipe.ltrim(cycle_history_key(marquee), 0, self.history_length - 1)
            await pipe.execute()

    async def last(self, marquee: str) -> dict[str, Any] | None:
        async with asyncio.timeout(self.timeout):
            raw = await self.redis.get(last_cycle_key(marquee))
        return None if raw is None else dict(json.loads(raw))

    async def history(self, marquee: str) -> list[dict[str, Any]]:
        async with asyncio.timeout(self.timeout):
            raw = await self.redis.lrange(cycle_history_key(marquee), 0, -1)
        return [dict(json.loads(item)) for item in raw]

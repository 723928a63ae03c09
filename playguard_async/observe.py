"""Logging set-up, the liveness test and the cycle records operators read.

Logs: structured events everywhere, rendered as JSON or console lines at the edge only. Context
bound with ``structlog.contextvars`` (marquee, cycle id, replica, fence, phase) is merged into every
line, so one cycle's lines can be followed in a journal without passing a logger around.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from playguard_async.keys import cycle_history_key, last_cycle_key
from playguard_async.redis_client import RedisClient, RedisPipeline

LogFormat = Literal["json", "console", "auto"]


def configure_logging(log_format: LogFormat = "auto", level: str = "info") -> None:
    """Route structlog (and stdlib logging of our libraries) to stderr in one format.

    Tracebacks, in either format, keep file, line and code only: structlog's console default
    (rich) prints every frame's local variables, which hold the Redis password and registry
    credentials, so the plain formatter is chosen here and nowhere is a locals-showing one used.
    """
    if log_format == "auto":
        log_format = "console" if sys.stderr.isatty() else "json"
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
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


LIVE_TICK_INTERVALS = 2.0
"""A tick loop is alive while its last tick is at most this many tick intervals old: one interval
is the normal gap, the second absorbs a slow tick and skipped grid points."""


def loop_alive(now: float, last_tick: float, interval: float) -> bool:
    """Whether a tick loop that last ticked at ``last_tick`` still turns at ``now``."""
    return now - last_tick <= LIVE_TICK_INTERVALS * interval


@dataclass(frozen=True)
class Pulse:
    """One reading of the tick loop's liveness."""

    alive: bool
    age: float
    limit: float
    draining: bool

    def describe(self) -> str:
        if self.draining:
            return f"draining, last tick {self.age:.1f} s ago"
        state = "ticking" if self.alive else "tick loop stalled"
        return f"{state}, last tick {self.age:.1f} s ago (limit {self.limit:g} s)"


@dataclass
class Liveness:
    """Whether the tick loop still turns: the one test behind /healthz and systemd's watchdog.

    Before the first tick, age counts from ``since`` (the start). A draining engine has stopped
    ticking on purpose and counts as alive: its drain is bounded by ``shutdown_grace``, and the
    service manager's stop timeout bounds the rest.
    """

    interval: float
    last_tick: Callable[[], float | None]
    draining: Callable[[], bool]
    since: float = field(default_factory=time.monotonic)

    def check(self, now: float | None = None) -> Pulse:
        now = time.monotonic() if now is None else now
        last = self.last_tick()
        reference = self.since if last is None else last
        draining = self.draining()
        return Pulse(
            alive=draining or loop_alive(now, reference, self.interval),
            age=now - reference,
            limit=LIVE_TICK_INTERVALS * self.interval,
            draining=draining,
        )


class CycleRecords:
    """Each Marquee's last cycle and a bounded history of them, in Redis, for operators.

    What a cycle saw and did must not live only in a log line: ``playguard status`` and anyone with
    redis-cli can read it here. History is capped at ``history_length`` records per Marquee.

    A record that could not be written (Redis slow or away) is kept here, at most
    ``history_length`` per Marquee, and written first by the next ``record`` call, so an outage
    leaves no hole in the history; the error still reaches the caller. A write that timed out after
    Redis applied it may so be written twice: at least once, never lost.
    """

    def __init__(self, redis: RedisClient, *, history_length: int, timeout: float) -> None:
        self.redis = redis
        self.history_length = history_length
        self.timeout = timeout
        self._unwritten: dict[str, deque[str]] = {}

    def unwritten(self, marquee: str) -> int:
        """How many of ``marquee``'s records wait for the next write."""
        return len(self._unwritten.get(marquee, ()))

    async def record(self, marquee: str, record: Mapping[str, Any]) -> None:
        """Write ``record`` (and any an earlier call could not) in a round trip of its own."""
        batch = self.pending(marquee, record)
        async with asyncio.timeout(self.timeout), self.redis.pipeline(transaction=True) as pipe:
            self.queue_writes(pipe, marquee, batch)
            await pipe.execute()
        self.written(marquee, batch)

    def pending(self, marquee: str, record: Mapping[str, Any]) -> list[str]:
        """Keep ``record`` as unwritten; the batch to write now, oldest first: what earlier
        writes left behind, then ``record``. Hand it to ``queue_writes``, then ``written``."""
        waiting = self._unwritten.setdefault(marquee, deque(maxlen=self.history_length))
        waiting.append(json.dumps(record, default=str, separators=(",", ":")))
        return list(waiting)

    def queue_writes(self, pipe: RedisPipeline, marquee: str, batch: list[str]) -> int:
        """Add the writes of ``batch`` to ``pipe``; how many commands that added. They touch one
        slot (``{marquee}``), so they may share a pipeline with keys of other slots."""
        pipe.set(last_cycle_key(marquee), batch[-1])
        pipe.lpush(cycle_history_key(marquee), *batch)
        pipe.ltrim(cycle_history_key(marquee), 0, self.history_length - 1)
        return 3

    def written(self, marquee: str, batch: list[str]) -> None:
        """Redis took ``batch``: it is no longer unwritten."""
        waiting = self._unwritten.get(marquee)
        if waiting is None:
            return
        for _ in range(min(len(batch), len(waiting))):
            waiting.popleft()
        if not waiting:
            del self._unwritten[marquee]

    async def last(self, marquee: str) -> dict[str, Any] | None:
        """The last record, ``{}`` when the key holds something this project did not write."""
        async with asyncio.timeout(self.timeout):
            raw = await self.redis.get(last_cycle_key(marquee))
        return None if raw is None else decoded_record(raw)

    async def history(self, marquee: str) -> list[dict[str, Any]]:
        async with asyncio.timeout(self.timeout):
            raw = await self.redis.lrange(cycle_history_key(marquee), 0, -1)
        return [decoded_record(item) for item in raw]


def decoded_record(raw: bytes | str) -> dict[str, Any]:
    """A stored JSON object as a dict; anything else (not JSON, not an object, nested past the
    parser's depth) as ``{}``: a Redis value is outside input, and an unreadable one must read as
    unknown, not end the reader."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}

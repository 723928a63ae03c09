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

from playguard_async.aio import bounded
from playguard_async.keys import cycle_history_key, last_cycle_key
from playguard_async.redis_client import RedisClient

LogFormat = Literal["json", "console", "auto"]


def configure_logging(
    log_format: LogFormat = "auto", level: str = "info", *, final: bool = False
) -> None:
    """Route structlog (and stdlib logging of our libraries) to stderr in one format.

    ``final``: the process's last configuration (a daemon's, from its settings), so each logger
    is assembled once, on its first use, rather than on every call: a filtered debug line cost a
    whole logger's assembly each time, 7 % of an in-sync cycle. Not for the configuration set
    before the settings are read, which a cached logger would keep.

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
        cache_logger_on_first_use=final,
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


# KEYS[1] a Marquee's last record, KEYS[2] its history. ARGV[1] records kept at most, ARGV[2] bytes
# of records kept at most, ARGV[3..] records, oldest first. The last of them becomes the last
# record; all are pushed to the history, which is then trimmed to the count and the bytes (the
# newest record always stays). Returns how many records the history keeps.
RECORD_SCRIPT = """
redis.call('SET', KEYS[1], ARGV[#ARGV])
redis.call('LPUSH', KEYS[2], unpack(ARGV, 3))
local budget = tonumber(ARGV[2])
local kept, used = 0, 0
for _, item in ipairs(redis.call('LRANGE', KEYS[2], 0, tonumber(ARGV[1]) - 1)) do
    used = used + #item
    if used > budget and kept > 0 then
        break
    end
    kept = kept + 1
end
redis.call('LTRIM', KEYS[2], 0, kept - 1)
return kept
"""


class CycleRecords:
    """Each Marquee's last cycle and a bounded history of them, in Redis, for operators.

    What a cycle saw and did must not live only in a log line: ``playguard status`` and anyone with
    redis-cli can read it here. Each record is at most ``record_max_bytes`` (``encode_record``);
    a Marquee's history keeps at most ``history_length`` records and ``history_max_bytes`` bytes of
    them, the newest first, so a Marquee costs Redis at most about ``history_max_bytes +
    record_max_bytes`` (its last record is kept apart too).

    A record that could not be written (Redis slow or away) is kept here, at most
    ``history_length`` per Marquee, and written first by the next write, so an outage leaves no
    hole in the history; the error still reaches the caller. A write that timed out after Redis
    applied it may so be written twice: at least once, never lost.
    """

    def __init__(
        self,
        redis: RedisClient,
        *,
        history_length: int,
        timeout: float,
        history_max_bytes: int = 32_768,
        record_max_bytes: int = 4_096,
    ) -> None:
        if record_max_bytes < MIN_RECORD_BYTES:
            raise ValueError(
                f"record_max_bytes must be at least {MIN_RECORD_BYTES}, got {record_max_bytes!r}"
            )
        self.redis = redis
        self.history_length = history_length
        self.history_max_bytes = history_max_bytes
        self.record_max_bytes = record_max_bytes
        self.timeout = timeout
        self._script = redis.register_script(RECORD_SCRIPT)
        self._unwritten: dict[str, deque[str]] = {}

    def unwritten(self, marquee: str) -> int:
        """How many of ``marquee``'s records wait for the next write."""
        return len(self._unwritten.get(marquee, ()))

    async def record(self, marquee: str, record: Mapping[str, Any]) -> None:
        """Write ``record`` (and any an earlier call could not) in a round trip of its own."""
        await self.record_batch(marquee, self.pending(marquee, record))

    def pending(self, marquee: str, record: Mapping[str, Any]) -> list[str]:
        """Keep ``record`` as unwritten; the batch to write now, oldest first: what earlier
        writes left behind, then ``record``. Send ``write_command``, then judge its answer with
        ``answered``."""
        waiting = self._unwritten.setdefault(marquee, deque(maxlen=self.history_length))
        waiting.append(encode_record(record, self.record_max_bytes))
        return list(waiting)

    def write_command(self, marquee: str, batch: list[str]) -> tuple[str | int, ...]:
        """The write of ``batch`` as one command on one slot (``{marquee}``), so it may share a
        batch with keys of other slots. A plain EVALSHA (redis-py's Cluster pipeline refuses its
        ``evalsha`` method): a lost script is the batch's to resend (``write_whole``)."""
        keys, args = self._arguments(marquee, batch)
        return ("EVALSHA", self._script.sha, len(keys), *keys, *args)

    def answered(self, marquee: str, batch: list[str], answer: object) -> BaseException | None:
        """Judge the answer to ``write_command``: None when Redis took ``batch``, else the
        error (the batch stays unwritten). A NOSCRIPT answer is the caller's to resend first
        (``write_whole``)."""
        if isinstance(answer, BaseException):
            return answer
        self.written(marquee, batch)
        return None

    async def record_batch(self, marquee: str, batch: list[str]) -> None:
        """Write ``batch`` (from ``pending``) on its own."""
        await self.write_whole(marquee, batch)
        self.written(marquee, batch)

    async def write_whole(self, marquee: str, batch: list[str]) -> Any:
        """Redis's answer to writing ``batch`` in a round trip of its own, the script sent whole
        if Redis lost it; not yet judged (see ``answered``)."""
        keys, args = self._arguments(marquee, batch)
        return await bounded(self.timeout, self._script(keys=keys, args=args))

    def _arguments(self, marquee: str, batch: list[str]) -> tuple[list[str], list[str | int]]:
        keys = [last_cycle_key(marquee), cycle_history_key(marquee)]
        return keys, [self.history_length, self.history_max_bytes, *batch]

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

    async def history(self, marquee: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        """The newest ``limit`` records (all kept ones by default), newest first."""
        last = (limit if limit is not None else self.history_length) - 1
        if last < 0:
            return []  # LRANGE 0 -1 would be the whole list
        async with asyncio.timeout(self.timeout):
            raw = await self.redis.lrange(cycle_history_key(marquee), 0, last)
        return [decoded_record(item) for item in raw]


MIN_RECORD_BYTES = 1_024
"""The smallest ``record_max_bytes``: what the fields a record never loses take at most."""

RECORD_KEPT_FIELDS = ("marquee", "cycle", "outcome", "finished_at", "duration")
"""Fields every record has, even empty: readers need them."""

NOTICE_DETAIL_LIMIT = 512
"""Characters of a notice's detail a record over its bound keeps."""

REASON_LIMIT = 512
"""Characters of the outcome's reason a record over its bound keeps."""

TRUNCATED_MARK = " … [truncated]"

_EMPTY: tuple[Any, ...] = (None, "", {}, [])
"""What a left-out field holds; compared against, never changed (built once, not per field)."""


def encode_record(record: Mapping[str, Any], max_bytes: int) -> str:
    """``record`` as compact JSON of at most ``max_bytes`` bytes (``MIN_RECORD_BYTES`` or more).

    Empty fields are left out (a reader takes a missing field for empty). A record still too big
    loses, in this order until it fits: the tail of each notice's detail, whole notices from the
    last, the findings, the actions, the tail of the reason; its ``truncated`` field counts what
    went. The outcome and the fields in ``RECORD_KEPT_FIELDS`` always stay (names cut to 64
    characters in the last resort).
    """
    compact: dict[str, Any] = {
        key: value
        for key, value in record.items()
        if key in RECORD_KEPT_FIELDS or value not in _EMPTY
    }
    if isinstance(actions := compact.get("actions"), dict):
        compact["actions"] = {phase: taken for phase, taken in actions.items() if taken}
    for key in ("actions", "findings", "notices"):
        if compact.get(key) == {}:
            del compact[key]
    text = _json(compact)
    if len(text.encode()) <= max_bytes:
        return text
    truncated: dict[str, int] = {}
    compact["truncated"] = truncated
    for shrink in _SHRINKS:
        shrink(compact, truncated, max_bytes)
        text = _json(compact)
        if len(text.encode()) <= max_bytes:
            return text
    last_resort = {
        key: value[:64] if isinstance(value, str) else value
        for key, value in compact.items()
        if key in (*RECORD_KEPT_FIELDS, "fence", "host_fence", "truncated")
    }
    return _json(last_resort)


_Shrink = Callable[[dict[str, Any], dict[str, int], int], None]
"""One step of ``encode_record``'s shrinking: (record, what was cut so far, the bound)."""


_ENCODER = json.JSONEncoder(default=str, separators=(",", ":"))
"""One encoder for every record: json.dumps with arguments makes a new one per call."""


def _json(value: Any) -> str:
    return _ENCODER.encode(value)


def _cut_notice_details(record: dict[str, Any], truncated: dict[str, int], max_bytes: int) -> None:
    for listed in _notice_lists(record):
        for notice in listed:
            detail = notice.get("detail") if isinstance(notice, dict) else None
            if isinstance(detail, str) and len(detail) > NOTICE_DETAIL_LIMIT:
                notice["detail"] = detail[:NOTICE_DETAIL_LIMIT] + TRUNCATED_MARK
                truncated["notice_details"] = truncated.get("notice_details", 0) + 1


def _drop_notices(record: dict[str, Any], truncated: dict[str, int], max_bytes: int) -> None:
    """Drop notices from the last until the record's size, as counted notice by notice, fits."""
    excess = len(_json(record).encode()) - max_bytes
    notices = record.get("notices")
    if not isinstance(notices, dict):
        return
    for phase in reversed(list(notices)):
        listed = notices[phase]
        while excess > 0 and isinstance(listed, list) and listed:
            excess -= len(_json(listed.pop()).encode()) + 1
            truncated["notices"] = truncated.get("notices", 0) + 1
        if not listed:
            del notices[phase]
    if not notices:
        del record["notices"]


def _drop(field: str) -> _Shrink:
    def drop(record: dict[str, Any], truncated: dict[str, int], max_bytes: int) -> None:
        value = record.pop(field, None)
        if isinstance(value, dict):
            truncated[field] = sum(
                len(v) if isinstance(v, list | dict) else 1 for v in value.values()
            )

    return drop


def _cut_reason(record: dict[str, Any], truncated: dict[str, int], max_bytes: int) -> None:
    reason = record.get("reason")
    if isinstance(reason, str) and len(reason) > REASON_LIMIT:
        record["reason"] = reason[:REASON_LIMIT] + TRUNCATED_MARK
        truncated["reason"] = len(reason) - REASON_LIMIT


def _notice_lists(record: dict[str, Any]) -> list[list[Any]]:
    notices = record.get("notices")
    if not isinstance(notices, dict):
        return []
    return [listed for listed in notices.values() if isinstance(listed, list)]


_SHRINKS: tuple[_Shrink, ...] = (
    _cut_notice_details,
    _drop_notices,
    _drop("findings"),
    _drop("actions"),
    _cut_reason,
)


def decoded_record(raw: bytes | str) -> dict[str, Any]:
    """A stored JSON object as a dict; anything else (not JSON, not an object, nested past the
    parser's depth) as ``{}``: a Redis value is outside input, and an unreadable one must read as
    unknown, not end the reader."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}

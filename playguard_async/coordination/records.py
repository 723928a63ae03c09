"""The cycle records operators read: each Marquee's last cycle and a bounded history, in Redis."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from redis.exceptions import RedisError

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.keys import (
    CYCLE_ENDED_CHANNEL,
    cycle_history_key,
    last_cycle_key,
)
from playguard_async.cycle_record import KEPT_FIELDS, StoredRecord
from playguard_async.kits.aio import bounded
from playguard_async.kits.turns import Backoff, ReaderStalled, Turns

log = structlog.get_logger("playguard.records")

# KEYS[1] a Marquee's last record, KEYS[2] its history. ARGV[1] records kept at most, ARGV[2] bytes
# of records kept at most, ARGV[3] the Marquee's name, ARGV[4..] records, oldest first. The last
# of them becomes the last record; each one the history does not hold yet is pushed to it (a
# write that timed out after Redis applied it comes again with the next: a record names its cycle
# and times, so an equal one is that same record), and the history is then trimmed to the count
# and the bytes (the newest record always stays). The name is then published on
# CYCLE_ENDED_CHANNEL (on a Cluster, every node passes it on). Returns how many records the
# history keeps. Both keys are this script's to write: a last record of another type than a string
# is replaced by SET like any other value, and a history of another type than a list (never
# written here; LPOS answers it with an error, pcall) is dropped first, or no record could be
# written again; until then the readers report them (``marquee_reads``) and leave them as they
# are. The common path runs no command more for it.
RECORD_SCRIPT = f"""
redis.call('SET', KEYS[1], ARGV[#ARGV])
for index = 4, #ARGV do
    local found = redis.pcall('LPOS', KEYS[2], ARGV[index])
    if type(found) == 'table' then
        redis.call('DEL', KEYS[2])
        found = false
    end
    if not found then
        redis.call('LPUSH', KEYS[2], ARGV[index])
    end
end
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
redis.call('PUBLISH', '{CYCLE_ENDED_CHANNEL}', ARGV[3])
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
    applied it comes again with the next, and the script keeps it once: never lost, never twice.
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

    async def record(self, marquee: str, record: Mapping[str, object]) -> None:
        """Write ``record`` (and any an earlier call could not) in a round trip of its own."""
        await self.record_batch(marquee, self.pending(marquee, record))

    def pending(self, marquee: str, record: Mapping[str, object]) -> list[str]:
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
        return keys, [self.history_length, self.history_max_bytes, marquee, *batch]

    def written(self, marquee: str, batch: list[str]) -> None:
        """Redis took ``batch``: it is no longer unwritten."""
        waiting = self._unwritten.get(marquee)
        if waiting is None:
            return
        for _ in range(min(len(batch), len(waiting))):
            waiting.popleft()
        if not waiting:
            del self._unwritten[marquee]

    async def last(self, marquee: str) -> StoredRecord | None:
        """The last record, ``{}`` when the key holds something this project did not write."""
        async with asyncio.timeout(self.timeout):
            raw = await self.redis.get(last_cycle_key(marquee))
        return None if raw is None else decoded_record(raw)

    async def history(self, marquee: str, *, limit: int | None = None) -> list[StoredRecord]:
        """The newest ``limit`` records (all kept ones by default), newest first."""
        last = (limit if limit is not None else self.history_length) - 1
        if last < 0:
            return []  # LRANGE 0 -1 would be the whole list
        async with asyncio.timeout(self.timeout):
            raw = await self.redis.lrange(cycle_history_key(marquee), 0, last)
        return [decoded_record(item) for item in raw]


MIN_RECORD_BYTES = 1_024
"""The smallest ``record_max_bytes``: what the fields a record never loses take at most."""

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
    loses, in this order until it fits: the tail of each notice's detail, the branch names
    fetch_branches found, whole notices from the last, the findings, the actions, the tail of the
    reason; its ``truncated`` field counts what
    went. The outcome and the fields in ``KEPT_FIELDS`` always stay (names cut to 64
    characters in the last resort).
    """
    compact: dict[str, Any] = {
        key: value for key, value in record.items() if key in KEPT_FIELDS or value not in _EMPTY
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
        if key in (*KEPT_FIELDS, "fence", "host_fence", "trace", "truncated")
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


def _drop_branch_lists(record: dict[str, Any], truncated: dict[str, int], max_bytes: int) -> None:
    """Drop the branch names fetch_branches lists per Playspec: as many as the repository has
    (dozens in a busy one), read by no reader, and before this step they pushed out the notices
    an operator reads ("still wrong")."""
    findings = record.get("findings")
    fetched = findings.get("fetch_branches") if isinstance(findings, dict) else None
    if isinstance(fetched, dict) and isinstance(fetched.get("branches"), dict):
        listed = fetched.pop("branches")
        truncated["branches"] = sum(len(v) if isinstance(v, list) else 1 for v in listed.values())


_SHRINKS: tuple[_Shrink, ...] = (
    _cut_notice_details,
    _drop_branch_lists,
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


NAME_MAX = 255
"""Bytes of a published name taken (anyone may publish on the channel; a Marquee name is short)."""

FOLLOW_WAIT = 1.0
"""Seconds one turn of ``follow_cycle_ends`` waits for a message (and so for ``stop``)."""

STALL_TURNS = 3
"""Turns in a row that come back empty without waiting before the subscription starts again on a
new connection (``kits.turns``): a subscribe confirmation or a health check's answer is one
such turn now and then, never three."""

FIRST_RETRY = 0.5
"""Seconds before the first new subscription after an interruption; doubled per failure."""

RETRY_CAP = 8.0
"""Seconds between attempts at most, so a subscriber is back within this long of Redis."""


async def follow_cycle_ends(
    redis: RedisClient,
    ended: Callable[[str], None],
    resumed: Callable[[], None],
    stop: asyncio.Event,
    *,
    wait: float = FOLLOW_WAIT,
    backoff: Backoff | None = None,
) -> None:
    """Call ``ended`` with each Marquee name published on ``CYCLE_ENDED_CHANNEL`` (whichever
    replica wrote the record) until ``stop`` is set. Pub/Sub keeps nothing for a subscriber that
    was away: after an interruption (Redis away, a failover), ``resumed`` is called once
    subscribed again, for the caller to read what it may have missed. Never raises for Redis's
    sake; a message is outside input, so only a short name is passed on.

    Never holds the event loop: each turn waits for a message, up to ``wait`` seconds, or is
    paced by ``Turns``; a subscription whose turns come back empty without waiting (redis-py
    answers "no message" at once, forever, once the kernel has ended its connection with ETIMEDOUT)
    is dropped like one that failed. Every new attempt subscribes on a new connection (``aclose``
    disconnects the old one), after a ``backoff`` wait that a start that held resets."""
    backoff = backoff or Backoff(first=FIRST_RETRY, cap=RETRY_CAP)
    interrupted = False
    while not stop.is_set():
        pubsub = redis.pubsub()
        turns = Turns(least=wait / 2, stall_after=STALL_TURNS)
        try:
            await pubsub.subscribe(CYCLE_ENDED_CHANNEL)
            if interrupted:
                resumed()
                interrupted = False
            while not stop.is_set():
                turns.begin()
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=wait)
                data = None if message is None else message.get("data")
                if isinstance(data, bytes) and 0 < len(data) <= NAME_MAX:
                    ended(data.decode("utf-8", "replace"))
                await turns.end(delivered=message is not None)
                if not turns.empty_in_a_row:
                    backoff.reset()
        except (RedisError, OSError, TimeoutError, ReaderStalled) as exc:
            level = log.warning if isinstance(exc, ReaderStalled) else log.debug
            level("records.follow_interrupted", error=repr(exc))
            interrupted = True
            with contextlib.suppress(TimeoutError):
                await bounded(backoff.next_wait(), stop.wait())
        finally:
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await pubsub.aclose()  # type: ignore[no-untyped-call]

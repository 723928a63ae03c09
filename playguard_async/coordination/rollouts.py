"""The rollout records in Redis: read with Redis's clock, changed only by compare-and-set.

A scope's keys share one hash tag (``keys.rollout_key``), so each script below touches one
Cluster slot: the record (JSON, ``phases.rollout_record``), the set of Marquees verified healthy
at its target and their count per wave. What the record means is the phases' to say; this module
only stores it, so that two replicas never both apply a step computed from the same reading:

- ``read_rollout``: the record as it is, the counts, and Redis's ``TIME``, in one round trip;
- ``write_rollout``: the new record, only while the stored one is still the one read (a new
  rollout also clears the marks of the one it replaces);
- ``mark_healthy``: a Marquee verified healthy at the target of the rollout whose id it read,
  counted once in its wave however often it says so; answers like ``read_rollout``.

A key of another type (anyone with redis-cli may have written one) reads as ``FOREIGN``: the
scope then has no rollout this process can use, and the desk holds its Marquees (fails closed).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from redis.commands.core import AsyncScript
from redis.exceptions import ResponseError

from playguard_async.coordination.client import RedisClient, registered, sender_for
from playguard_async.coordination.foreign import is_wrong_type
from playguard_async.coordination.keys import (
    ROLLOUTS_KEY,
    rollout_counts_key,
    rollout_key,
    rollout_marks_key,
)
from playguard_async.kits.aio import bounded

log = structlog.get_logger("playguard.rollouts")

FOREIGN = "\0foreign"
"""``RolloutRead.raw`` of a record key that holds another type than a string."""

SCOPES_LISTED = 10_000
"""Scopes ``rollout_scopes`` returns at most."""

# KEYS[1] the record, KEYS[2] the healthy marks, KEYS[3] the counts. ``reading(raw)``, given
# what GET of the record answered under pcall, returns the record (false when absent, the marker
# ARGV[1] when of another type: GET's answer is then an error), the counts as a flat list (empty
# when the key is of another type) and TIME's seconds and microseconds. pcall rather than TYPE
# first: every cycle of a cohort reads, and Redis counts each command a script calls
# (bench/README.md, "Rollouts").
_READING = """
local function reading(raw)
    local record = false
    if type(raw) == 'string' then record = raw
    elseif type(raw) == 'table' then record = ARGV[1] end
    local counts = redis.pcall('HGETALL', KEYS[3])
    if counts.err then counts = {} end
    local now = redis.call('TIME')
    return {record, counts, now[1], now[2]}
end
"""

_READ_SCRIPT = _READING + "return reading(redis.pcall('GET', KEYS[1]))\n"

# KEYS as above; ARGV[1] the record as read ('' when there was none), ARGV[2] the new record,
# ARGV[3] '1' when it opens a new rollout (the old one's marks and counts go). 1 when written,
# 0 when the stored record is no longer the one read (or is of another type).
_WRITE_SCRIPT = """
local kind = redis.call('TYPE', KEYS[1]).ok
local stored = ''
if kind == 'string' then stored = redis.call('GET', KEYS[1])
elseif kind ~= 'none' then return 0 end
if stored ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[3] == '1' then redis.call('DEL', KEYS[2], KEYS[3]) end
return 1
"""

# KEYS as above; ARGV[1] the marker for a foreign record, ARGV[2] the rollout's id, ARGV[3] the
# Marquee, ARGV[4] its wave. Marks and counts the Marquee once, and only while the record is
# still that rollout's; then answers as _READING does (the record as read before the mark, which
# does not change it).
_MARK_SCRIPT = (
    _READING
    + """
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'string' then
    local ok, record = pcall(cjson.decode, raw)
    if ok and type(record) == 'table' and record['id'] == ARGV[2]
        and redis.call('SADD', KEYS[2], ARGV[3]) == 1 then
        redis.call('HINCRBY', KEYS[3], ARGV[4], 1)
    end
end
return reading(raw)
"""
)


@dataclass(frozen=True)
class RolloutRead:
    """A scope's record as read (``raw``: None when there is none, ``FOREIGN`` when its key is
    of another type), how many Marquees of each wave were verified healthy, and Redis's time."""

    scope: str
    raw: str | None
    healthy: dict[int, int]
    now: float

    @property
    def expected(self) -> str:
        """The record as ``write_rollout`` compares it."""
        return self.raw or ""


def _keys(scope: str) -> tuple[str, str, str]:
    return rollout_key(scope), rollout_marks_key(scope), rollout_counts_key(scope)


def _reading(scope: str, answer: Sequence[Any]) -> RolloutRead:
    record, counts, seconds, micros = answer
    raw = None if record is None else _text(record)
    flat = [_text(item) for item in counts]
    healthy: dict[int, int] = {}
    for wave, count in zip(flat[::2], flat[1::2], strict=True):
        if wave.isdigit() and count.lstrip("-").isdigit():
            healthy[int(wave)] = int(count)
    return RolloutRead(scope, raw, healthy, int(seconds) + int(micros) / 1e6)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _run(
    redis: RedisClient,
    timeout: float,
    script: AsyncScript,
    keys: Sequence[str],
    args: Sequence[str],
) -> Awaitable[Any]:
    """``script``'s answer within ``timeout``, by SHA through the client's sender
    (``client.sender_for``): on one server the cycles' command channel, which pipelines every
    cycle's commands on one connection. Every cycle of a Marquee in a rollout's cohort reads its
    record, and each admitted one marks itself healthy: as EVALs on pool connections these two
    cost more CPU than the rest of an in-sync cycle (bench/README.md, "Rollouts")."""
    sender = sender_for(redis, timeout=timeout)
    return sender.call(sender.prepare(script, keys, args))


async def read_rollout(redis: RedisClient, scope: str, timeout: float) -> RolloutRead:
    answer = await _run(redis, timeout, registered(redis, _READ_SCRIPT), _keys(scope), (FOREIGN,))
    return _reading(scope, answer)


async def write_rollout(
    redis: RedisClient, read: RolloutRead, record: str, *, opens: bool, timeout: float
) -> bool:
    """Store ``record`` for ``read.scope`` unless its record changed since ``read``; whether it
    did. A rollout that ``opens`` is also listed (``rollout_scopes``)."""
    argv = (read.expected, record, "1" if opens else "0")
    written = bool(
        await _run(redis, timeout, registered(redis, _WRITE_SCRIPT), _keys(read.scope), argv)
    )
    if written and opens:
        await bounded(timeout, redis.sadd(ROLLOUTS_KEY, read.scope))
    return written


async def mark_healthy(
    redis: RedisClient, scope: str, rollout_id: str, marquee: str, *, wave: int, timeout: float
) -> RolloutRead:
    """Count ``marquee`` verified healthy at the target of rollout ``rollout_id`` (once), and
    read the scope again (so the step it may complete is judged on fresh counts)."""
    argv = (FOREIGN, rollout_id, marquee, str(wave))
    answer = await _run(redis, timeout, registered(redis, _MARK_SCRIPT), _keys(scope), argv)
    return _reading(scope, answer)


async def unmarked(
    redis: RedisClient, scope: str, marquees: Sequence[str], timeout: float
) -> list[str]:
    """Those of ``marquees`` not verified healthy at the target of ``scope``'s rollout."""
    if not marquees:
        return []
    found = await bounded(timeout, redis.smismember(rollout_marks_key(scope), list(marquees)))
    return [name for name, marked in zip(marquees, found, strict=True) if not marked]


SCOPE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}@[A-Za-z0-9._/-]{1,255}")
"""What a scope looks like (a Playspec's name, ``@``, a branch): a member of the index that does
not is someone else's, and is not read."""


async def rollout_scopes(redis: RedisClient, timeout: float) -> list[str]:
    """The scopes that had a rollout, in name order (at most ``SCOPES_LISTED``); the index of
    another Redis type reads as none, with one log line."""
    try:
        members = await bounded(timeout, redis.smembers(ROLLOUTS_KEY))
    except ResponseError as exc:
        if not is_wrong_type(exc):
            raise
        log.warning("rollout.unreadable", key=ROLLOUTS_KEY, value="a key of another type")
        return []
    scopes = (_text(member) for member in members)
    return sorted(scope for scope in scopes if SCOPE.fullmatch(scope))[:SCOPES_LISTED]

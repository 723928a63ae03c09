"""The token lock's Lua scripts: each a named constant with its KEYS, ARGV and answers, registered
once per client (``scripts_of``) and run by SHA through the lock's sender (``lock.TokenLock``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.commands.core import AsyncScript

from playguard_async.coordination.client import RedisClient, registered

# What a lock's optional hold key holds the lock back with: false when no key is given or the key
# is absent; its value when it is a string key, whatever it holds (the lock reads no meaning into
# it); and when it holds another type (a hash, a list...), a one-element array of that type's
# name: a key the lock cannot read is no go-ahead, so it holds too. pcall: the key's type must not
# fail the scripts.
HOLD_OF = """
local function hold_of(key)
    if key == nil then
        return false
    end
    local value = redis.pcall('GET', key)
    if type(value) == 'table' then
        return {redis.call('TYPE', key)['ok']}
    end
    return value
end
"""

# KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] (only for a lock with a hold key) its hold key.
# ARGV[1] holder record, ARGV[2] ttl in ms, ARGV[3] the acquire's not-after: microseconds on
# Redis's clock (TIME), stamped by the client (see below).
# Returns the new fence (integer) when the lock was free, nil when someone holds it (a lock key of
# another type than a string too: SET NX leaves any existing key alone), LATE (-1) when Redis runs
# it past its not-after, having written nothing, and what the hold key holds the lock back with
# (``HOLD_OF``: a string, or a one-element array naming a foreign type) when it has one, having
# written nothing, whoever holds the lock. The counter is only incremented by a successful SET:
# while a lock is held, its fence equals the counter's value.
#
# Why the not-after: the client gives up on an acquire at its deadline D (``TokenLock.timeout``
# after sending) and only then deletes, by exact value, the record it may have written. If TCP
# delivers the acquire later than that (a retransmission after a network blip), a SET without
# this check would take a free key for a whole ttl, held by no lease. D is stamped on Redis's clock
# from a TIME read on the same connection, early by at most that read's round trip
# (``channel.ServerClock``); so an acquire that runs at all ran before D, hence before the
# clean-up, which removes it. Only Redis's clock is compared with a stamp, and only by Redis: the
# replicas' clocks need no agreement with it or with each other, and a replica's not-after never
# refuses another replica's acquire (each stamps its own). A Sentinel failover or a Cluster
# resharding sends the acquire to another server, which is read again: every stamp is made on the
# connection, so the server, that judges it. What is trusted is what the ttl already trusts: that
# Redis's clock does not step back (keys expire by it).
#
# A counter holding anything but an integer (not written by us: a string of another text, or a key
# of another type, read with pcall) is dropped first, or no lease could ever be had again: the
# count restarts, and the hosts' fence checks refuse the low fences until the engine lifts the
# counter to what they accepted (``raise_fence``).
ACQUIRE_SCRIPT = f"""{HOLD_OF}
local now = redis.call('TIME')
if tonumber(now[1]) * 1000000 + tonumber(now[2]) > tonumber(ARGV[3]) then
    return -1
end
local hold = hold_of(KEYS[3])
if hold then
    return hold
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    local counter = redis.pcall('GET', KEYS[2])
    if counter and (type(counter) ~= 'string' or not string.match(counter, '^%d+$')) then
        redis.call('DEL', KEYS[2])
    end
    return redis.call('INCR', KEYS[2])
end
return false
"""

# KEYS[1] lock key, KEYS[2] (only for a lock with a hold key) its hold key. ARGV[1] the holder
# record written at acquire, ARGV[2] ttl in ms.
# Returns 1 when renewed, 0 when the key is gone, -1 when another record holds it (or a value of
# another type: pcall, never an error), and what the hold key holds the lock back with
# (``HOLD_OF``) when renewed while it has one.
RENEW_SCRIPT = f"""{HOLD_OF}
local current = redis.pcall('GET', KEYS[1])
if current == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return hold_of(KEYS[2]) or 1
end
if current == false then
    return 0
end
return -1
"""

# KEYS[1] lock key. ARGV[1] the holder record written at acquire.
# Returns 1 when deleted, 0 when the key is gone, -1 when another record holds it (or a value of
# another type: pcall, never an error; it is left where it is).
RELEASE_SCRIPT = """
local current = redis.pcall('GET', KEYS[1])
if current == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
end
if current == false then
    return 0
end
return -1
"""

# KEYS[1] fence counter. ARGV[1] a fence a host has accepted. Raises the counter to ARGV[1] when
# it is lower (never lowers it); returns the counter's value afterwards. A counter holding
# anything but a number (not written by us, of any type: pcall) is replaced.
RAISE_FENCE_SCRIPT = """
local current = redis.pcall('GET', KEYS[1])
current = type(current) == 'string' and tonumber(current) or nil
local seen = tonumber(ARGV[1])
if current == nil or current < seen then
    redis.call('SET', KEYS[1], ARGV[1])
    return seen
end
return current
"""

LATE = -1
"""ACQUIRE_SCRIPT's answer when Redis ran it past its not-after."""


def is_hold(answer: object) -> bool:
    """Whether a script's answer is what a hold key holds the lock back with (a string, or the
    one-element array naming a foreign type: every other answer is an integer or nil)."""
    return isinstance(answer, bytes | str | list)


def hold_value(answer: bytes | str | list[Any]) -> tuple[bytes | str | None, str | None]:
    """A hold answer (``is_hold``) as ``lock.LockHeld``'s ``value`` and ``foreign_type``: the
    key's value, or None and the name of the other type it holds (None if Redis named none)."""
    if not isinstance(answer, list):
        return answer, None
    kind = answer[0] if answer else None
    text = kind.decode("ascii", "replace") if isinstance(kind, bytes) else kind
    return None, None if text is None else str(text)


@dataclass(frozen=True, slots=True)
class Scripts:
    """The lock's scripts as registered with one client."""

    acquire: AsyncScript
    renew: AsyncScript
    release: AsyncScript
    raise_fence: AsyncScript


def scripts_of(redis: RedisClient) -> Scripts:
    """The lock's scripts registered with ``redis`` (``client.registered``: once per client)."""
    return Scripts(
        acquire=registered(redis, ACQUIRE_SCRIPT),
        renew=registered(redis, RENEW_SCRIPT),
        release=registered(redis, RELEASE_SCRIPT),
        raise_fence=registered(redis, RAISE_FENCE_SCRIPT),
    )

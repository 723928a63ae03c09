"""A key that holds a value of another Redis type than playguard keeps there.

Every key playguard reads is outside input: anyone with redis-cli may ``HSET`` a Marquee's pause
key or ``LPUSH`` its last-cycle key. Redis answers GET, LRANGE and the like on such a key with a
WRONGTYPE error, which is that key's answer, not a failure of Redis: each reader turns it into a
``ForeignType`` (``read_typed``), reported for the Marquee whose key it is, and reads on. A reader
never writes over it; the scripts that write the key anyway say what they do with it in their
comments (``lock``, ``records``).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from redis.exceptions import ResponseError

from playguard_async.coordination.client import RedisClient
from playguard_async.kits.aio import bounded

T = TypeVar("T")

WRONG_TYPE = "WRONGTYPE"
"""The error code Redis answers a command on a key of another type with."""


def is_wrong_type(answer: object) -> bool:
    """Whether ``answer`` (a command's answer or error) is Redis's WRONGTYPE error: the key holds
    a value of another type than the command reads (the error code is Redis's protocol)."""
    return isinstance(answer, ResponseError) and str(answer).startswith(WRONG_TYPE)


@dataclass(frozen=True, slots=True)
class ForeignType:
    """``key`` (``what`` to an operator: "pause key", "lock key") holds a Redis ``kind`` (TYPE's
    answer: hash, list, set, zset, stream...) that playguard never writes there; ``kind`` is
    None when it was not asked (a reader in a callback)."""

    what: str
    key: str
    kind: str | None = None

    def describe(self) -> str:
        """One line for an operator: which key, what it holds."""
        if self.kind is None:
            return f"{self.what} {self.key} holds a value of another type than a string"
        if self.kind == "none":  # deleted between the read and TYPE
            return f"{self.what} {self.key} held a value of another type while it was read"
        return f"{self.what} {self.key} holds a {self.kind}"


async def type_of(redis: RedisClient, key: str, timeout: float) -> str:
    """Redis's TYPE of ``key``, as text."""
    kind = await bounded(timeout, redis.type(key))
    return kind.decode("ascii", "replace") if isinstance(kind, bytes) else str(kind)


async def read_typed(
    redis: RedisClient, what: str, key: str, timeout: float, read: Awaitable[T]
) -> T | ForeignType:
    """What ``read`` (one command on ``key``) answers, or the key's ``ForeignType`` when Redis
    answers it WRONGTYPE; any other error is raised."""
    try:
        return await read
    except ResponseError as exc:
        if not is_wrong_type(exc):
            raise
        return ForeignType(what, key, await type_of(redis, key, timeout))

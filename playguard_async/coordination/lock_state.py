"""A lock as operators read it: who holds it (``lock_record.Holder``, the record the lock key
holds), its fence and time left (``LockState``), read in one round trip (``read_lock``). For
showing and for an operator's exact-record delete, never for deciding who may work: that is the
lease's.

A key is outside input: another program or an operator's SET may have written anything, of any
type, and reading it never fails for what it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.foreign import ForeignType, is_wrong_type, type_of
from playguard_async.coordination.keys import fence_key, lock_key
from playguard_async.coordination.lock import DEFAULT_TIMEOUT
from playguard_async.coordination.lock_record import Holder
from playguard_async.kits.aio import bounded


@dataclass(frozen=True, slots=True)
class LockState:
    """A held lock as seen by an operator: its holder, fence and time left.

    ``holder`` is None, and ``fence`` may be, when the keys hold values this project did not
    write; ``record`` is the key's exact value all the same, so an operator's delete compares
    against precisely what was shown, ours or not. A lock key of another type than a string has
    no value to compare: ``foreign`` then says what it holds, and ``record`` is empty.
    """

    name: str
    holder: Holder | None
    fence: int | None
    ttl_left: float
    record: bytes = field(repr=False)
    foreign: ForeignType | None = None


async def inspect_lock(
    redis: RedisClient, name: str, *, timeout: float = DEFAULT_TIMEOUT
) -> LockState | None:
    """Read a lock's holder, fence and time left in one round trip (``read_lock``)."""
    state, _ = await read_lock(redis, name, timeout=timeout)
    return state


async def read_lock(
    redis: RedisClient, name: str, *, timeout: float = DEFAULT_TIMEOUT
) -> tuple[LockState | None, ForeignType | None]:
    """A lock's holder, fence and time left in one round trip, and its fence counter's
    ``ForeignType`` when that holds another type than a string (then ``fence`` is None). A lock
    key of another type reads as held by it (``LockState.foreign``); each such key costs a TYPE
    of its own. Never fails for what a key holds; a Redis error is raised."""
    key, counter = lock_key(name), fence_key(name)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.get(key)
        pipe.pttl(key)
        pipe.get(counter)
        raw, pttl, fence = await bounded(timeout, pipe.execute(raise_on_error=False))
    for answer in (raw, pttl, fence):
        if isinstance(answer, BaseException) and not is_wrong_type(answer):
            raise answer
    fence_foreign = None
    if is_wrong_type(fence):
        fence_foreign = ForeignType(
            "fence counter", counter, await type_of(redis, counter, timeout)
        )
        fence = None
    foreign = None
    if is_wrong_type(raw):
        foreign = ForeignType("lock key", key, await type_of(redis, key, timeout))
        raw = b""
    if raw is None:
        return None, fence_foreign
    try:
        fence_number: int | None = None if fence_foreign else int(fence or 0)
    except ValueError:  # a counter someone else overwrote
        fence_number = None
    record = raw if isinstance(raw, bytes) else str(raw).encode()
    state = LockState(
        name=name,
        holder=None if foreign else Holder.parse(record),
        fence=fence_number,
        ttl_left=max(0, int(pttl)) / 1000,
        record=record,
        foreign=foreign,
    )
    return state, fence_foreign

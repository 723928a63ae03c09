"""A Marquee's pause key as its lock's hold key, against the real redis-server: whatever the key
holds, the lock's own scripts read it, never fail on it, and never write past it.

The key is outside input (anyone with redis-cli may write it), so the cases are classes of value
and type, not one example: any string pauses (an empty one and one that looks like a script's
own answer included), and so does any other type (someone meant something by it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from redis.asyncio import Redis

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.keys import (
    FLEET_PAUSE_KEY,
    fence_key,
    lock_key,
    marquee_lock_name,
    pause_key,
)
from playguard_async.coordination.lock import LockHeld, TokenLock
from playguard_async.coordination.pause import FLEET, FleetPauseWatch, Pause
from playguard_lab.process import free_port
from tests.support.topologies import TopologyUnderTest

pytestmark = pytest.mark.integration

MARQUEE = "edge-1"
NAME = marquee_lock_name(MARQUEE)
TTL = 30.0

STRING_VALUES = [
    b'{"user":"ops","host":"bastion","reason":"incident","since":1,"until":2}',
    b"",
    b"1",
    b"0",
    b"-1",
    b"\x00\xff\xfe garbage \x1b[31m",
    b"x" * 100_000,
]
"""Values that pause: every string, whatever it says (a script answer look-alike included)."""

Writer = Callable[[Redis, str], Awaitable[object]]

OTHER_TYPES: list[tuple[str, Writer]] = [
    ("hash", lambda redis, key: redis.hset(key, "reason", "x")),
    ("list", lambda redis, key: redis.rpush(key, "x")),
    ("set", lambda redis, key: redis.sadd(key, "x")),
    ("zset", lambda redis, key: redis.zadd(key, {"x": 1})),
    ("stream", lambda redis, key: redis.xadd(key, {"x": "1"})),
]
"""Keys GET fails on: they pause all the same (a key the lock cannot read is no go-ahead)."""


def paused_lock(redis: RedisClient) -> TokenLock:
    return TokenLock(
        redis, NAME, ttl=TTL, timeout=1.0, replica="test-replica", hold_key=pause_key(MARQUEE)
    )


@pytest.mark.parametrize("value", STRING_VALUES, ids=range(len(STRING_VALUES)))
async def test_any_string_in_the_pause_key_refuses_the_acquire_and_writes_nothing(
    redis: Redis, value: bytes
) -> None:
    await redis.set(fence_key(NAME), 7)
    await redis.set(pause_key(MARQUEE), value)

    with pytest.raises(LockHeld) as refused:
        await paused_lock(redis).acquire()

    assert refused.value.value == value
    assert await redis.exists(lock_key(NAME)) == 0
    assert await redis.get(fence_key(NAME)) == b"7", "no fence handed out"


@pytest.mark.parametrize("value", STRING_VALUES, ids=range(len(STRING_VALUES)))
async def test_a_pause_during_a_lease_renews_it_and_says_so(redis: Redis, value: bytes) -> None:
    lease = await paused_lock(redis).acquire()
    assert lease is not None
    await redis.pexpire(lock_key(NAME), 1_000)
    await redis.set(pause_key(MARQUEE), value)

    with pytest.raises(LockHeld) as paused:
        await lease.renew()

    assert paused.value.value == value
    assert await redis.get(lock_key(NAME)) == lease.record.encode()
    assert await redis.pttl(lock_key(NAME)) > (TTL - 5) * 1000, "renewed to the full ttl"
    assert lease.remaining() > TTL - 5
    assert (await lease.release()).value == "released"


@pytest.mark.parametrize(("kind", "write"), OTHER_TYPES, ids=[kind for kind, _ in OTHER_TYPES])
async def test_a_pause_key_of_another_type_pauses_and_is_left_as_it_was(
    redis: Redis, kind: str, write: Writer
) -> None:
    """playguard never writes one, so someone meant something by it: a key the lock cannot
    read is no go-ahead (``lock_scripts.HOLD_OF``), and ``LockHeld`` says what type it holds."""
    lease = await paused_lock(redis).acquire()
    assert lease is not None
    await write(redis, pause_key(MARQUEE))
    assert await redis.type(pause_key(MARQUEE)) == kind.encode()

    with pytest.raises(LockHeld) as renewed:
        await lease.renew()  # renewed all the same: the lease is still held
    assert (await lease.release()).value == "released"
    with pytest.raises(LockHeld) as refused:
        await paused_lock(redis).acquire()

    for paused in (renewed, refused):
        assert (paused.value.value, paused.value.foreign_type) == (None, kind)
        pause = Pause.from_held(MARQUEE, paused.value)
        assert pause.foreign is not None
        assert (pause.foreign.key, pause.foreign.kind) == (pause_key(MARQUEE), kind)
        assert pause.describe() == f"paused: pause key {pause_key(MARQUEE)} holds a {kind}"
    assert await redis.exists(lock_key(NAME)) == 0, "nothing taken"
    assert await redis.type(pause_key(MARQUEE)) == kind.encode(), "left as it was"


async def test_the_pause_key_works_on_every_topology(topology: TopologyUnderTest) -> None:
    """The pause key shares the lock's hash slot: a Cluster runs the scripts with it."""
    redis = topology.redis
    lease = await paused_lock(redis).acquire()
    assert lease is not None
    await redis.set(pause_key(MARQUEE), b"frozen", px=60_000)

    with pytest.raises(LockHeld):
        await lease.renew()
    assert (await lease.release()).value == "released"
    with pytest.raises(LockHeld):
        await paused_lock(redis).acquire()
    await redis.delete(pause_key(MARQUEE))
    lease = await paused_lock(redis).acquire()
    assert lease is not None
    assert (await lease.release()).value == "released"


async def gets_served(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_get", {}).get("calls", 0))


async def test_the_fleet_pause_is_read_at_most_once_per_interval_for_all_cycles(
    redis: Redis,
) -> None:
    watch = FleetPauseWatch(redis, every=0.3, timeout=1.0)
    await redis.set(FLEET_PAUSE_KEY, Pause.taken_now(FLEET, "freeze", 60).encode())
    await redis.config_resetstat()

    first = await asyncio.gather(*(watch.settled(watch.refresh()) for _ in range(50)))
    again = [await watch.settled(watch.refresh()) for _ in range(50)]
    assert await gets_served(redis) == 1
    assert {pause.reason if pause else None for pause in first + again} == {"freeze"}

    await redis.delete(FLEET_PAUSE_KEY)
    await asyncio.sleep(0.35)
    assert await watch.settled(watch.refresh()) is None, "lifted: seen after the interval"
    assert await gets_served(redis) == 2


@pytest.mark.parametrize("value", STRING_VALUES, ids=range(len(STRING_VALUES)))
async def test_any_fleet_pause_value_pauses_and_reads_as_a_record(
    redis: Redis, value: bytes
) -> None:
    await redis.set(FLEET_PAUSE_KEY, value)
    watch = FleetPauseWatch(redis, every=1.0, timeout=1.0)

    pause = await watch.settled(watch.refresh())

    assert pause is not None
    assert pause.scope == FLEET
    assert len(pause.describe()) < 400, "an unknown value is shown bounded"
    assert "\x1b" not in pause.describe()
    assert "\x00" not in pause.describe()


async def test_a_failed_read_of_the_fleet_pause_leaves_the_last_answer_standing(
    redis: Redis,
) -> None:
    await redis.set(FLEET_PAUSE_KEY, Pause.taken_now(FLEET, "freeze", 60).encode())
    watch = FleetPauseWatch(redis, every=0.0, timeout=0.5)
    assert await watch.settled(watch.refresh()) is not None
    nowhere = Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5)
    try:
        watch.redis = nowhere
        pause = await watch.settled(watch.refresh())
    finally:
        await nowhere.aclose()

    assert pause is not None
    assert pause.reason == "freeze"

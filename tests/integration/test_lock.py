"""The token lock against the lab's real redis-server: exclusivity, fencing, loss, clean release.

The scenarios that take ``topology`` run on a single server, a Sentinel group and a Cluster alike.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from playguard_async.coordination.channel import ChannelledRedis
from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.keys import fence_key, lock_key, once_key
from playguard_async.coordination.lock import (
    LockLost,
    LockUnavailable,
    ReleaseResult,
    TokenLock,
)
from playguard_async.coordination.lock_record import Holder
from playguard_async.coordination.lock_scripts import ACQUIRE_SCRIPT, LATE
from playguard_async.coordination.lock_state import inspect_lock
from playguard_async.service.notifications import once
from playguard_lab import RedisServer
from tests.support.topologies import TopologyUnderTest

pytestmark = pytest.mark.integration

TIMEOUT = 0.5


def make_lock(redis: RedisClient, name: str = "marquee:edge-1", ttl: float = 30.0) -> TokenLock:
    return TokenLock(redis, name, ttl=ttl, timeout=TIMEOUT, replica="test-replica")


async def wait_until_gone(redis: RedisClient, key: str, limit: float) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if not await redis.exists(key):
            return True
        await asyncio.sleep(0.02)
    return False


async def test_200_concurrent_acquirers_have_exactly_one_winner(
    topology: TopologyUnderTest,
) -> None:
    redis = topology.redis
    locks = [make_lock(redis) for _ in range(200)]
    leases = await asyncio.gather(*(lock.acquire() for lock in locks))
    winners = [lease for lease in leases if lease is not None]
    assert len(winners) == 1
    assert winners[0].fence == 1
    assert await redis.get(fence_key("marquee:edge-1")) == b"1"


async def test_fences_strictly_increase_over_release_and_expiry(
    topology: TopologyUnderTest,
) -> None:
    redis = topology.redis
    fences: list[int] = []
    for _ in range(3):
        lease = await make_lock(redis).acquire()
        assert lease is not None
        fences.append(lease.fence)
        assert await lease.release() is ReleaseResult.RELEASED
    for _ in range(2):
        lease = await make_lock(redis, ttl=0.15).acquire()
        assert lease is not None
        fences.append(lease.fence)
        assert await wait_until_gone(redis, lock_key("marquee:edge-1"), 2.0)
    assert fences == sorted(set(fences))
    assert fences == [1, 2, 3, 4, 5]
    assert await redis.exists(fence_key("marquee:edge-1")) == 1, "the fence outlives the lock"


async def test_stale_release_keeps_new_owners_key(topology: TopologyUnderTest) -> None:
    redis = topology.redis
    stale = await make_lock(redis, ttl=0.15).acquire()
    assert stale is not None
    assert await wait_until_gone(redis, lock_key("marquee:edge-1"), 2.0)
    fresh = await make_lock(redis).acquire()
    assert fresh is not None
    assert fresh.fence > stale.fence

    assert await stale.release() is ReleaseResult.STOLEN
    assert await redis.get(lock_key("marquee:edge-1")) == fresh.record.encode()
    await fresh.renew()
    assert await fresh.release() is ReleaseResult.RELEASED


async def test_renew_after_expiry_raises_expired(topology: TopologyUnderTest) -> None:
    redis = topology.redis
    lease = await make_lock(redis, ttl=0.15).acquire()
    assert lease is not None
    assert await wait_until_gone(redis, lock_key("marquee:edge-1"), 2.0)
    with pytest.raises(LockLost) as lost:
        await lease.renew()
    assert lost.value.reason == "expired"
    assert await lease.release() is ReleaseResult.EXPIRED


async def test_renew_when_another_token_holds_the_key_raises_stolen(
    topology: TopologyUnderTest,
) -> None:
    redis = topology.redis
    lease = await make_lock(redis).acquire()
    assert lease is not None
    await redis.set(lock_key("marquee:edge-1"), "someone-else")
    with pytest.raises(LockLost) as lost:
        await lease.renew()
    assert lost.value.reason == "stolen"
    assert await lease.release() is ReleaseResult.STOLEN
    assert await redis.get(lock_key("marquee:edge-1")) == b"someone-else"


async def test_renew_restores_full_ttl_and_moves_the_deadline(topology: TopologyUnderTest) -> None:
    redis = topology.redis
    lock = make_lock(redis, ttl=5.0)
    before = time.monotonic()
    lease = await lock.acquire()
    after = time.monotonic()
    assert lease is not None
    assert before + 5.0 - lock.drift <= lease.deadline <= after + 5.0 - lock.drift
    await redis.pexpire(lock_key("marquee:edge-1"), 1000)
    first_deadline = lease.deadline  # the renewal is sent a round trip later: a later deadline
    await lease.renew()
    assert lease.deadline > first_deadline
    assert 4000 < await redis.pttl(lock_key("marquee:edge-1")) <= 5000
    await lease.release()


async def test_renew_while_redis_paused_is_lost_unreachable_in_bounded_time(
    topology: TopologyUnderTest,
) -> None:
    lease = await make_lock(topology.redis).acquire()
    assert lease is not None
    server = topology.node_serving(lock_key("marquee:edge-1"))
    server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(LockLost) as lost:
            await lease.renew()
        elapsed = time.monotonic() - started
    finally:
        server.resume()
    assert lost.value.reason == "unreachable"
    assert lost.value.__cause__ is not None
    assert elapsed < TIMEOUT + 1.0, f"renew took {elapsed:.2f}s against a {TIMEOUT}s bound"


async def test_renew_while_redis_down_is_lost_unreachable(
    redis: Redis, redis_server: RedisServer
) -> None:
    lease = await make_lock(redis).acquire()
    assert lease is not None
    redis_server.kill()
    try:
        with pytest.raises(LockLost) as lost:
            await lease.renew()
        assert await lease.release() is ReleaseResult.UNKNOWN
    finally:
        redis_server.restart()
    assert lost.value.reason == "unreachable"


async def test_acquire_while_redis_down_raises_unavailable(
    redis: Redis, redis_server: RedisServer
) -> None:
    redis_server.kill()
    try:
        with pytest.raises(LockUnavailable):
            await make_lock(redis).acquire()
    finally:
        redis_server.restart()


async def test_release_while_redis_paused_is_unknown_and_the_key_does_not_outlive_its_ttl(
    redis: Redis, redis_server: RedisServer
) -> None:
    """Unknown, never released: the delete may land once Redis resumes, or the ttl ends it."""
    lease = await make_lock(redis, ttl=1.5).acquire()
    assert lease is not None
    redis_server.pause()
    try:
        result = await lease.release()
    finally:
        redis_server.resume()
    assert result is ReleaseResult.UNKNOWN
    assert await wait_until_gone(redis, lock_key("marquee:edge-1"), 3.0)


def spy_on_channel(redis: Redis, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """An event set when the next lock command is handed to the client's channel: from then on
    it goes out whatever its caller does."""
    assert isinstance(redis, ChannelledRedis), "the daemon's client carries lock commands"
    channel = redis.channel
    handed = asyncio.Event()
    queue = channel.queue  # what ``send`` and every lock command go through

    def spy(*arguments: Any, **options: Any) -> asyncio.Future[Any]:
        handed.set()
        return queue(*arguments, **options)

    monkeypatch.setattr(channel, "queue", spy)
    return handed


async def test_release_finishes_even_when_cancelled_twice(
    redis: Redis, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = await make_lock(redis).acquire()
    assert lease is not None
    sending = spy_on_channel(redis, monkeypatch)
    redis_server.pause()
    try:
        task = asyncio.create_task(lease.release())
        await sending.wait()  # the delete is on its way to the paused server
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        redis_server.resume()
    assert await wait_until_gone(redis, lock_key("marquee:edge-1"), 2.0)
    assert await lease.release() is ReleaseResult.RELEASED, "settled by the late answer"


async def test_acquire_that_redis_runs_past_its_deadline_writes_nothing(
    redis: Redis, redis_server: RedisServer
) -> None:
    """The late delivery of issue 24 without a network: the SET reaches the paused server's
    socket, the client gives up and undoes, and the server runs the SET only after that."""
    lock = make_lock(redis)
    warm = await make_lock(redis, name="marquee:warm-up").acquire()  # the channel is connected,
    assert warm is not None  # so the SET is written before the pause bites
    await warm.release()
    redis_server.pause()
    try:
        with pytest.raises(LockUnavailable):
            await lock.acquire()
        await asyncio.sleep(TIMEOUT)  # the undo has gone out (it waits for the deadline)
    finally:
        redis_server.resume()
    assert await redis.ping()  # on a connection of its own: the late SET has been read by now
    await asyncio.sleep(0.2)
    assert await redis.exists(lock_key("marquee:edge-1")) == 0
    assert await redis.get(fence_key("marquee:edge-1")) is None, "refused, not taken and undone"
    lease = await lock.acquire()
    assert lease is not None, "the name is free at once"
    assert lease.fence == 1


@pytest.mark.parametrize(
    ("stamp_from_now_us", "taken"),
    [(-60_000_000, False), (-1_000, False), (-1, False), (1_000_000, True)],
    ids=["a-minute-late", "a-millisecond-late", "a-microsecond-late", "in-time"],
)
async def test_acquire_script_refuses_a_stamp_redis_clock_has_passed(
    topology: TopologyUnderTest, stamp_from_now_us: int, taken: bool
) -> None:
    redis = topology.redis
    key, counter = lock_key("marquee:edge-1"), fence_key("marquee:edge-1")
    seconds, micros = await redis.time()
    stamp = seconds * 1_000_000 + micros + stamp_from_now_us
    answer = await redis.eval(ACQUIRE_SCRIPT, 2, key, counter, "record", 30_000, stamp)
    assert answer == (1 if taken else LATE)
    assert await redis.exists(key) == int(taken)
    assert await redis.exists(counter) == int(taken)


async def test_cancelled_acquire_whose_set_landed_leaves_no_key(
    redis: Redis, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = make_lock(redis)
    warm = await make_lock(redis, name="marquee:warm-up").acquire()  # the channel is connected,
    assert warm is not None  # so the SET is written before the pause bites
    await warm.release()
    sent = spy_on_channel(redis, monkeypatch)
    redis_server.pause()
    try:
        task = asyncio.create_task(lock.acquire())
        await sent.wait()  # the SET is on its way to the paused server
        task.cancel()
    finally:
        redis_server.resume()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_until_gone(redis, lock_key("marquee:edge-1"), 2.0)
    assert int(await redis.get(fence_key("marquee:edge-1")) or 0) == 1, "the SET did land"


async def test_cancelled_acquire_before_sending_leaves_no_key(redis: Redis) -> None:
    task = asyncio.create_task(make_lock(redis).acquire())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await redis.exists(lock_key("marquee:edge-1")) == 0


async def test_holder_is_readable_by_operators(topology: TopologyUnderTest) -> None:
    redis = topology.redis
    lease = await make_lock(redis, ttl=20.0).acquire()
    assert lease is not None
    state = await inspect_lock(redis, "marquee:edge-1")
    assert state is not None
    assert state.holder is not None
    assert state.holder.replica == "test-replica"
    assert state.holder.token == lease.token
    assert state.fence == lease.fence
    assert 19.0 < state.ttl_left <= 20.0
    assert Holder.parse(lease.record) == state.holder
    await lease.release()
    assert await inspect_lock(redis, "marquee:edge-1") is None


async def test_scripts_reload_after_script_flush(topology: TopologyUnderTest) -> None:
    """NOSCRIPT, as a new primary after a failover or a resharding answers it, is a reload."""
    lock = make_lock(topology.redis)
    lease = await lock.acquire()
    assert lease is not None
    topology.flush_scripts()
    await lease.renew()
    assert await lease.release() is ReleaseResult.RELEASED


async def test_once_fires_once_until_its_ttl_passes(redis: Redis) -> None:
    assert await once(redis, "dispatch:abc", ttl=0.3) is True
    assert await once(redis, "dispatch:abc", ttl=0.3) is False
    assert await once(redis, "dispatch:other", ttl=0.3) is True
    assert await wait_until_gone(redis, once_key("dispatch:abc"), 2.0)
    assert await once(redis, "dispatch:abc", ttl=0.3) is True

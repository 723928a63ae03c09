"""The lock's command channel against a real redis-server: batching, order, errors that stay
with their own command, commands that outlive their callers, a server that stops answering or
goes away, and scripts Redis lost."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError, ResponseError

from playguard_async.coordination.channel import ChannelledRedis, CommandChannel, run_script
from playguard_async.coordination.client import connect_redis
from playguard_lab import RedisServer


def channel_of(redis: Redis) -> CommandChannel:
    assert isinstance(redis, ChannelledRedis), "connect_redis gives single servers a channel"
    return redis.channel


async def test_concurrent_commands_share_batches_and_keep_their_order(redis: Redis) -> None:
    channel = channel_of(redis)
    await channel.send("PING")
    before = channel.batches
    answers = await asyncio.gather(*(channel.send("INCR", "counter") for _ in range(500)))
    assert answers == list(range(1, 501)), "each caller gets its own answer, in sending order"
    assert channel.batches - before < 50, "500 concurrent commands went out in a few writes"


@pytest.mark.parametrize(
    ("bad_command", "message"),
    [
        (("INCR", "text"), "not an integer"),
        (("NO-SUCH-COMMAND",), "unknown command"),
        (("EVALSHA", "0" * 40, 0), "No matching script"),
        (("SET", "key"), "wrong number of arguments"),
    ],
)
async def test_an_error_answer_fails_only_its_own_command(
    redis: Redis, bad_command: tuple[object, ...], message: str
) -> None:
    channel = channel_of(redis)
    await redis.set("text", "abc")
    first = channel.send("INCR", "counter")
    bad = channel.send(*bad_command)
    last = channel.send("INCR", "counter")
    assert await first == 1
    with pytest.raises(ResponseError, match=message):
        await bad
    assert await last == 2, "the stream stayed in step after the error"


async def test_a_cancelled_callers_command_still_runs(redis: Redis) -> None:
    channel = channel_of(redis)

    async def caller() -> object:
        return await channel.send("INCR", "counter")

    tasks = [asyncio.create_task(caller()) for _ in range(20)]
    await asyncio.sleep(0)  # every command is queued
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert await channel.send("GET", "counter") == b"20"


async def test_a_batch_broken_mid_read_fails_only_the_unanswered_commands(redis: Redis) -> None:
    channel = channel_of(redis)
    own_id = await channel.send("CLIENT", "ID")
    answered = channel.send("INCR", "counter")
    kill = channel.send("CLIENT", "KILL", "ID", own_id, "SKIPME", "no")  # answered, then hung up
    unanswered = channel.send("SET", "never", "1")
    assert await answered == 1
    assert await kill == 1
    with pytest.raises(ConnectionError):
        await unanswered
    assert await channel.send("EXISTS", "never") == 0, "the next command reconnects"
    assert await redis.exists("never") == 0


async def test_a_connection_killed_between_batches_is_replaced_before_sending(
    redis: Redis,
) -> None:
    channel = channel_of(redis)
    own_id = await channel.send("CLIENT", "ID")
    assert await redis.client_kill_filter(_id=own_id) == 1
    await asyncio.sleep(0.05)  # the hang-up reaches the channel's idle socket
    assert await channel.send("INCR", "counter") == 1, "not lost to the dead connection"


async def test_a_stopped_server_times_out_the_batch_and_the_channel_recovers(
    redis: Redis, redis_server: RedisServer
) -> None:
    channel = channel_of(redis)
    await channel.send("PING")
    redis_server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await channel.send("INCR", "counter")
        waited = time.monotonic() - started
    finally:
        redis_server.resume()
    assert waited < channel.timeout + 1.0, "bounded by the channel's timeout, not forever"
    assert await channel.send("PING") == b"PONG"


@pytest.mark.parametrize(
    "timeouts",
    [
        pytest.param((0.15, 0.3, None, 3.0), id="increasing"),
        pytest.param((3.0, None, 0.3, 0.15), id="decreasing"),
        pytest.param((0.3, 3.0, 0.15, None), id="mixed"),
    ],
)
async def test_a_command_past_its_timeout_fails_alone_and_its_late_answer_is_dropped(
    redis: Redis, timeouts: tuple[float | None, ...]
) -> None:
    """Commands queued behind a slow one (a BLPOP that holds the connection 0.6 s, within the
    channel's 1 s bound): each fails once its own timeout passed, whatever order they were sent
    in, the others get their answers, and the stream stays in step."""
    channel = channel_of(redis)
    await channel.send("PING")
    slow = channel.send("BLPOP", "nothing", 0.6)
    started = time.monotonic()
    sent = [(timeout, channel.send("INCR", "counter", timeout=timeout)) for timeout in timeouts]
    for timeout, answer in sorted(sent, key=lambda pair: pair[0] or 99.0):
        if timeout is not None and timeout < 0.6:
            with pytest.raises(TimeoutError):
                await answer
            assert time.monotonic() - started < timeout + 0.25, "failed at its own deadline"
        else:
            assert isinstance(await answer, int), "answered: the batch itself was on time"
    assert await slow is None
    assert await channel.send("INCR", "counter") == len(timeouts) + 1, "every INCR still ran"


async def test_a_timeout_holds_while_the_server_is_stopped(
    redis: Redis, redis_server: RedisServer
) -> None:
    """A command waiting behind a batch the stopped server never answers fails at its own
    timeout, not at the batch's (the channel's 1 s)."""
    channel = channel_of(redis)
    await channel.send("PING")
    redis_server.pause()
    try:
        hung = channel.send("PING")
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await channel.send("INCR", "counter", timeout=0.2)
        waited = time.monotonic() - started
        with pytest.raises(TimeoutError):
            await hung
    finally:
        redis_server.resume()
    assert waited < 0.5
    assert await channel.send("PING", timeout=1.0) == b"PONG"


async def test_a_script_redis_lost_is_sent_whole(redis: Redis) -> None:
    channel = channel_of(redis)
    script = redis.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    assert await run_script(channel, script, ["counter"], [2]) == 2
    await redis.script_flush()
    assert await run_script(channel, script, ["counter"], [3]) == 5
    assert await run_script(channel, script, ["counter"], [4]) == 9, "loaded again by EVAL"


async def test_closing_sends_what_was_queued_and_refuses_more(
    live_redis_server: RedisServer,
) -> None:
    client = connect_redis(live_redis_server.url, socket_timeout=1, connect_timeout=1)
    channel = channel_of(client)  # type: ignore[arg-type]
    await client.delete("closing")
    queued = [channel.send("INCR", "closing") for _ in range(3)]
    await client.aclose()
    assert [await answer for answer in queued] == [1, 2, 3]
    with pytest.raises(ConnectionError, match="closed"):
        channel.send("PING")
    check = Redis.from_url(live_redis_server.url)
    try:
        assert await check.get("closing") == b"3"
        await check.delete("closing")
    finally:
        await check.aclose()

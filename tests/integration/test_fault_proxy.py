"""The fault proxy itself, in front of the lab's real redis-server: each shape does what the
scenarios rely on (a delay is a lower bound on every round trip, a stall moves no byte and keeps
the connection open, a cut closes it, a throttle holds the rate), per direction, with bounded
memory and nothing left running after ``aclose``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import redis
from redis import Redis as SyncRedis

from playguard_async.kits.aio import bounded
from playguard_lab import RedisServer
from tests.support.fault_proxy import (
    BUFFER_CHUNKS,
    CHUNK,
    THROTTLE_SLICE,
    Direction,
    FaultProxy,
    Shape,
    ThreadedProxy,
)
from tests.support.fencing import eventually

pytestmark = pytest.mark.integration

PING = b"PING\r\n"
PONG = b"+PONG\r\n"


@pytest.fixture
async def proxy(live_redis_server: RedisServer) -> AsyncIterator[FaultProxy]:
    async with FaultProxy("127.0.0.1", live_redis_server.port) as running:
        yield running


async def opened(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def round_trip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, command: bytes = PING
) -> bytes:
    writer.write(command)
    await writer.drain()
    return await reader.readline()


async def test_pass_relays_both_ways_and_counts_the_bytes(proxy: FaultProxy) -> None:
    reader, writer = await opened(proxy)
    assert await round_trip(reader, writer) == PONG
    assert proxy.moved == {Direction.UP: len(PING), Direction.DOWN: len(PONG)}
    writer.close()


@pytest.mark.parametrize(
    ("directions", "rounds"),
    [((Direction.UP, Direction.DOWN), 2), ((Direction.UP,), 1), ((Direction.DOWN,), 1)],
)
async def test_delay_is_a_lower_bound_on_every_round_trip_per_direction(
    proxy: FaultProxy, directions: tuple[Direction, ...], rounds: int
) -> None:
    reader, writer = await opened(proxy)
    proxy.delay(0.3, directions)
    for _ in range(2):
        started = time.monotonic()
        assert await round_trip(reader, writer) == PONG
        assert time.monotonic() - started >= 0.3 * rounds
    writer.close()


async def test_delay_keeps_pipelining_a_latency_not_a_queue(proxy: FaultProxy) -> None:
    """Twenty pipelined commands under 0.3 s each way cost one round trip, not twenty."""
    reader, writer = await opened(proxy)
    proxy.delay(0.3)
    started = time.monotonic()
    writer.write(PING * 20)
    answers = [await reader.readline() for _ in range(20)]
    assert answers == [PONG] * 20
    assert 0.6 <= time.monotonic() - started < 20 * 0.6 / 2
    writer.close()


async def test_stall_moves_no_byte_keeps_the_connection_and_delivers_late_when_lifted(
    proxy: FaultProxy, live_redis_server: RedisServer
) -> None:
    """The half-open link: the client times out, the connection stays open on both sides, and
    what it sent is still delivered once the link moves again (the late delivery a lock must
    survive)."""
    reader, writer = await opened(proxy)
    assert await round_trip(reader, writer) == PONG
    moved = dict(proxy.moved)
    proxy.stall()
    with pytest.raises(TimeoutError):
        await bounded(0.5, round_trip(reader, writer, b"SET stalled-key late\r\n"))
    assert proxy.moved == moved
    assert proxy.open_connections == 1
    assert not reader.at_eof()
    with SyncRedis(port=live_redis_server.port, socket_timeout=2) as direct:
        assert direct.get("stalled-key") is None
        proxy.heal()
        assert await bounded(2, reader.readline()) == b"+OK\r\n"
        assert direct.get("stalled-key") == b"late"
        direct.delete("stalled-key")
    writer.close()


async def test_a_stall_of_one_direction_lets_the_other_move(
    proxy: FaultProxy, live_redis_server: RedisServer
) -> None:
    """Answers stalled: the command runs on the server, its answer never comes back."""
    reader, writer = await opened(proxy)
    proxy.stall((Direction.DOWN,))
    writer.write(b"SET one-way arrived\r\n")
    with SyncRedis(port=live_redis_server.port, socket_timeout=2) as direct:
        await eventually(lambda: direct.get("one-way"), timeout=2, what="SET on the server")
        assert direct.get("one-way") == b"arrived"
        with pytest.raises(TimeoutError):
            await bounded(0.5, reader.readline())
        assert proxy.moved[Direction.DOWN] == 0
        direct.delete("one-way")
    writer.close()


async def test_throttle_holds_the_rate(proxy: FaultProxy) -> None:
    reader, writer = await opened(proxy)
    size, rate = 60_000, 100_000.0
    proxy.throttle(rate, (Direction.UP,))
    value = b"x" * size
    command = b"*3\r\n$3\r\nSET\r\n$9\r\nthrottled\r\n$%d\r\n%s\r\n" % (size, value)
    started = time.monotonic()
    assert await round_trip(reader, writer, command) == b"+OK\r\n"
    assert time.monotonic() - started >= len(command) / rate - THROTTLE_SLICE
    proxy.heal()
    assert await round_trip(reader, writer, b"DEL throttled\r\n") == b":1\r\n"
    writer.close()


async def test_cut_closes_open_connections_and_new_ones_until_healed(proxy: FaultProxy) -> None:
    reader, writer = await opened(proxy)
    assert await round_trip(reader, writer) == PONG
    proxy.cut()
    assert await bounded(2, reader.read()) == b""
    late_reader, late_writer = await opened(proxy)
    assert await bounded(2, late_reader.read()) == b""
    proxy.heal()
    healed_reader, healed_writer = await opened(proxy)
    assert await round_trip(healed_reader, healed_writer) == PONG
    for each in (writer, late_writer, healed_writer):
        each.close()


async def test_a_stalled_direction_holds_a_bounded_buffer(proxy: FaultProxy) -> None:
    """A client that keeps writing into a stall is held back by TCP, not by proxy memory."""
    _, writer = await opened(proxy)
    proxy.stall((Direction.UP,))
    block = b"x" * CHUNK
    for _ in range(512):  # 32 MiB, more than the proxy and both kernels' buffers
        writer.write(block)
    await asyncio.sleep(1.0)
    held = proxy.held(Direction.UP)
    assert CHUNK <= held <= (BUFFER_CHUNKS + 1) * CHUNK
    assert writer.transport.get_write_buffer_size() > 0, "the client was never held back"
    writer.transport.abort()


async def test_aclose_ends_every_connection_and_task(live_redis_server: RedisServer) -> None:
    before = asyncio.all_tasks()
    proxy = await FaultProxy("127.0.0.1", live_redis_server.port).start()
    streams = [await opened(proxy) for _ in range(3)]
    proxy.stall()
    for _, writer in streams:
        writer.write(PING)
    await asyncio.sleep(0.1)
    assert proxy.open_connections == 3
    await bounded(5, proxy.aclose())
    for reader, writer in streams:
        assert await bounded(2, reader.read()) == b""
        writer.close()
    assert asyncio.all_tasks() == before
    with pytest.raises(ConnectionRefusedError):
        await opened(proxy)


async def test_a_delay_set_while_bytes_wait_applies_to_them(proxy: FaultProxy) -> None:
    """Lifting a stall into a delay: the held command goes out no sooner than its delay."""
    reader, writer = await opened(proxy)
    proxy.stall((Direction.UP,))
    writer.write(PING)
    await asyncio.sleep(0.1)
    proxy.shape(Shape(delay=0.5), (Direction.UP,))
    assert await bounded(2, reader.readline()) == PONG
    assert proxy.moved[Direction.UP] == len(PING)
    writer.close()


def test_threaded_proxy_drives_a_synchronous_client_and_stops_its_thread(
    live_redis_server: RedisServer,
) -> None:
    with ThreadedProxy("127.0.0.1", live_redis_server.port) as proxy:
        client = SyncRedis(port=proxy.port, socket_timeout=0.5)
        assert client.ping()
        proxy.stall()
        with pytest.raises(redis.TimeoutError):
            client.ping()
        assert proxy.open_connections() >= 1  # redis-py retried on new ones, all stalled
        proxy.heal()
        client.connection_pool.disconnect()
        assert client.ping()
        client.close()
    assert not proxy._thread.is_alive()

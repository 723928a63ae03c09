"""Lock cost, side by side in one run: a full lock cycle against the bare Redis round trips.

Prints, for asyncio and uvloop, sequential full cycles per second (acquire + renew + release on one
connection) next to bare PINGs and bare SET NX on the same client, and the ratio between them: a
full cycle is three scripted round trips, so about 1/3 of the PING rate is the ceiling. Then a
fan-out: N concurrent acquirers of N different names through the daemon's bounded pool.

    .venv/bin/python bench/lock_cycle.py [--seconds 2] [--fanout 10000]

Starts its own redis-server from the lab on an ephemeral loopback port. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvloop

from playguard_async.lab import RedisServer
from playguard_async.lock import TokenLock
from playguard_async.observe import configure_logging
from playguard_async.redis_client import connect_redis


async def rate(seconds: float, operation: Callable[[], Awaitable[object]]) -> float:
    done = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        await operation()
        done += 1
    return done / seconds


async def sequential(url: str, seconds: float) -> dict[str, float]:
    redis = connect_redis(url)
    lock = TokenLock(redis, "bench", ttl=30.0)
    counter = 0

    async def full_cycle() -> None:
        lease = await lock.acquire()
        assert lease is not None
        await lease.renew()
        await lease.release()

    async def set_nx() -> None:
        nonlocal counter
        counter += 1
        await redis.set(f"bench:set:{counter}", "1", nx=True, px=30000)

    try:
        await full_cycle()  # loads the scripts
        figures = {
            "ping/s": await rate(seconds, redis.ping),
            "set_nx/s": await rate(seconds, set_nx),
            "lock_cycle/s": await rate(seconds, full_cycle),
        }
    finally:
        await redis.flushall()
        await redis.aclose()
    return figures


async def fanout(url: str, count: int) -> tuple[float, int]:
    redis = connect_redis(url, max_connections=100)
    try:
        locks = [TokenLock(redis, f"fan:{i}", ttl=30.0) for i in range(count)]
        started = time.perf_counter()
        leases = await asyncio.gather(*(lock.acquire() for lock in locks))
        elapsed = time.perf_counter() - started
        await redis.flushall()
    finally:
        await redis.aclose()
    return elapsed, sum(lease is not None for lease in leases)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--fanout", type=int, default=10_000)
    args = parser.parse_args()
    configure_logging("json", "warning")  # the lock logs every acquire at info: not what we time
    with tempfile.TemporaryDirectory() as workdir, RedisServer(Path(workdir)) as server:
        for name, factory in (("asyncio", None), ("uvloop", uvloop.new_event_loop)):
            with asyncio.Runner(loop_factory=factory) as runner:
                figures = runner.run(sequential(server.url, args.seconds))
            ratio = figures["lock_cycle/s"] / figures["ping/s"]
            shown = "  ".join(f"{key} {value:8.0f}" for key, value in figures.items())
            print(f"{name:8} {shown}  lock_cycle/ping {ratio:.2f}")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            elapsed, won = runner.run(fanout(server.url, args.fanout))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"fan-out  {args.fanout} acquirers of distinct names through a 100-connection pool: "
            f"{won} won in {elapsed:.2f}s ({won / elapsed:.0f}/s), peak RSS {rss:.0f} MiB"
        )


if __name__ == "__main__":
    main()

"""Lock cost, side by side in one run: TokenLock against redis-py's asyncio Lock and bare commands.

Prints, for asyncio and uvloop:

- sequential full cycles per second (acquire + renew + release on one connection) of TokenLock and
  of redis-py's ``redis.asyncio.lock.Lock`` (acquire + extend to a full ttl + release), with bare
  PINGs and SET NX on the same client, and the ratio TokenLock / redis-py;
- the same two lock cycles run by 100 concurrent holders (``--holders``), each on a name of its own,
  through the daemon's bounded pool: total cycles per second and the ratio.

A lock object is made per cycle in both, as the engine makes one per Marquee cycle. The two locks
run in alternating rounds (``--rounds``) and the best round of each counts, so a noisy neighbour
hurts both alike. Then a fan-out: N concurrent acquirers of N different names.

    .venv/bin/python bench/lock_cycle.py [--seconds 1] [--rounds 3] [--holders 100] [--fanout 10000]

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
from redis.asyncio.lock import Lock as RedisPyLock

from playguard_async.coordination.client import RedisClient, connect_redis
from playguard_async.coordination.lock import TokenLock
from playguard_async.service.logs import configure_logging
from playguard_lab import RedisServer

TTL = 30.0

Cycle = Callable[[RedisClient, str], Awaitable[None]]


async def token_lock_cycle(redis: RedisClient, name: str) -> None:
    lease = await TokenLock(redis, name, ttl=TTL).acquire()
    assert lease is not None
    await lease.renew()
    await lease.release()


async def redis_py_lock_cycle(redis: RedisClient, name: str) -> None:
    lock = RedisPyLock(redis, name, timeout=TTL)
    assert await lock.acquire(blocking=False)
    await lock.extend(TTL, replace_ttl=True)
    await lock.release()


CYCLES: dict[str, Cycle] = {"token_lock": token_lock_cycle, "redis_py_lock": redis_py_lock_cycle}


async def rate(seconds: float, operation: Callable[[], Awaitable[object]]) -> float:
    done = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        await operation()
        done += 1
    return done / seconds


async def concurrent_rate(seconds: float, holders: int, redis: RedisClient, cycle: Cycle) -> float:
    """Cycles per second of ``holders`` tasks, each cycling its own name until time is up."""
    end = time.perf_counter() + seconds
    counts = [0] * holders

    async def holder(index: int) -> None:
        name = f"bench:holder:{index}"
        while time.perf_counter() < end:
            await cycle(redis, name)
            counts[index] += 1

    started = time.perf_counter()
    await asyncio.gather(*(holder(i) for i in range(holders)))
    return sum(counts) / (time.perf_counter() - started)


async def measure(url: str, seconds: float, rounds: int, holders: int) -> dict[str, float]:
    redis = connect_redis(url, max_connections=holders)
    counter = 0

    async def set_nx() -> None:
        nonlocal counter
        counter += 1
        await redis.set(f"bench:set:{counter}", "1", nx=True, px=30000)

    figures: dict[str, float] = {}
    try:
        for cycle in CYCLES.values():  # loads the scripts and opens the pool's connections
            await concurrent_rate(seconds / 4, holders, redis, cycle)
        figures["ping/s"] = await rate(seconds, redis.ping)
        figures["set_nx/s"] = await rate(seconds, set_nx)
        for _ in range(rounds):
            for label, cycle in CYCLES.items():
                sequential = await rate(seconds, lambda c=cycle: c(redis, "bench"))  # type: ignore[misc]
                together = await concurrent_rate(seconds, holders, redis, cycle)
                for key, value in ((f"{label}/s", sequential), (f"{label}x{holders}/s", together)):
                    figures[key] = max(figures.get(key, 0.0), value)
    finally:
        await redis.flushall()
        await redis.aclose()
    return figures


async def fanout(url: str, count: int) -> tuple[float, int]:
    redis = connect_redis(url, max_connections=100)
    try:
        locks = [TokenLock(redis, f"fan:{i}", ttl=TTL) for i in range(count)]
        started = time.perf_counter()
        leases = await asyncio.gather(*(lock.acquire() for lock in locks))
        elapsed = time.perf_counter() - started
        await redis.flushall()
    finally:
        await redis.aclose()
    return elapsed, sum(lease is not None for lease in leases)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--holders", type=int, default=100)
    parser.add_argument("--fanout", type=int, default=10_000)
    args = parser.parse_args()
    # As `playguard run` sets it up; what a daemon logs per cycle at info is not timed here.
    configure_logging("json", "warning", final=True)
    with tempfile.TemporaryDirectory() as workdir, RedisServer(Path(workdir)) as server:
        for name, factory in (("asyncio", None), ("uvloop", uvloop.new_event_loop)):
            with asyncio.Runner(loop_factory=factory) as runner:
                f = runner.run(measure(server.url, args.seconds, args.rounds, args.holders))
            ours, theirs = f["token_lock/s"], f["redis_py_lock/s"]
            many = f"x{args.holders}/s"
            ours_many, theirs_many = f["token_lock" + many], f["redis_py_lock" + many]
            print(
                f"{name:8} ping/s {f['ping/s']:6.0f}  set_nx/s {f['set_nx/s']:6.0f}  "
                f"sequential: token_lock {ours:5.0f}/s redis_py_lock {theirs:5.0f}/s "
                f"ratio {ours / theirs:.2f}  {args.holders} holders: token_lock "
                f"{ours_many:5.0f}/s redis_py_lock {theirs_many:5.0f}/s "
                f"ratio {ours_many / theirs_many:.2f}"
            )
        if args.fanout:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                elapsed, won = runner.run(fanout(server.url, args.fanout))
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"fan-out  {args.fanout} acquirers of distinct names through a 100-connection "
                f"pool: {won} won in {elapsed:.2f}s ({won / elapsed:.0f}/s), peak RSS {rss:.0f} MiB"
            )


if __name__ == "__main__":
    main()

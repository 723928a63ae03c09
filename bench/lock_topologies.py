"""The lock cycle on each Redis topology, side by side in one run, with and without replica acks.

Prints sequential full lock cycles per second (acquire + renew + release, one client) on a single
server, a Sentinel group (1 primary, 2 replicas, 3 sentinels) and a Cluster (3 primaries with a
replica each), the last two with ``lock_min_replicas`` 0 and 1, and every figure as a ratio of
the single server. Rounds are interleaved (each topology once per round) so a noisy
machine shifts them all alike; the figure is the median of the rounds.

    .venv/bin/python bench/lock_topologies.py [--seconds 1] [--rounds 3]

Starts its own servers from the lab on ephemeral loopback ports. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from playguard_async.coordination.client import connect_redis
from playguard_async.coordination.lock import TokenLock
from playguard_async.service.logs import configure_logging
from playguard_lab import RedisServer
from playguard_lab.topologies import ClusterLab, SentinelGroup


async def cycles_per_second(url: str, min_replicas: int, seconds: float) -> float:
    redis = connect_redis(url)
    lock = TokenLock(redis, "bench", ttl=30.0, min_replicas=min_replicas, replica_timeout=1.0)
    try:
        for _ in range(10):  # load the scripts, open the connection, learn the slots
            lease = await lock.acquire()
            assert lease is not None, "a replica did not acknowledge"
            await lease.release()
        done = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            lease = await lock.acquire()
            assert lease is not None, "a replica did not acknowledge"
            await lease.renew()
            await lease.release()
            done += 1
        return done / seconds
    finally:
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per figure and round")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    configure_logging("console", "warning")
    with tempfile.TemporaryDirectory(prefix="playguard-bench-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        urls = {
            "single": stack.enter_context(RedisServer(root / "single")).url,
            "sentinel": stack.enter_context(SentinelGroup(root / "sentinel")).url,
            "cluster": stack.enter_context(ClusterLab(root / "cluster")).url,
        }
        # A single server has no replica to acknowledge anything.
        runs = [("single", 0), ("sentinel", 0), ("sentinel", 1), ("cluster", 0), ("cluster", 1)]
        figures: dict[tuple[str, int], list[float]] = {run: [] for run in runs}
        for _ in range(options.rounds):
            for name, acks in runs:
                rate = asyncio.run(cycles_per_second(urls[name], acks, options.seconds))
                figures[name, acks].append(rate)
    base = statistics.median(figures["single", 0])
    print(f"{'topology':<10} {'min_replicas':>12} {'cycles/s':>10} {'vs single':>10}")
    for name, acks in runs:
        rate = statistics.median(figures[name, acks])
        print(f"{name:<10} {acks:>12} {rate:>10.0f} {rate / base:>10.2f}")


if __name__ == "__main__":
    main()

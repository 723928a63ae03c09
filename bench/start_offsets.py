"""What waiting out a tick's start offsets costs the event loop, as a replica's share grows.

A tick starts one cycle per Marquee of the replica's share, each first sleeping a random start
offset (0 to ``tick_jitter`` x ``tick_interval``: 6 s by default) unless the daemon stops
meanwhile. This script sleeps n such offsets at once, both ways side by side on uvloop:

- ``event``: each sleep an ``asyncio.Event.wait`` under ``asyncio.timeout`` (the engine's
  ``stopping`` Event, as ``kits.aio.wait_or_stop`` did before 2026-12-05): a timed-out wait
  takes its waiter out of the Event's deque by a linear search;
- ``signal``: ``kits.aio.StopSignal.sleep``, the engine's way now: one timer, one set entry.

Printed per n: the process CPU until the last offset ended, the longest the loop was held at once
(a 10 ms ticker beside the sleeps: a held loop lets a Redis answer outlast its timeout, unread),
and their ratios. bench/README.md ("Fleet simulation") has the figures.

    .venv/bin/python bench/start_offsets.py [--shares 12500,25000,50000,100000] [--spread 6]

Nothing but the loop is started. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable

import uvloop

from playguard_async.kits.aio import StopSignal

Sleeper = Callable[[float], Awaitable[None]]


def event_sleeper() -> Sleeper:
    stopping = asyncio.Event()

    async def sleep(seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await stopping.wait()

    return sleep


def signal_sleeper() -> Sleeper:
    return StopSignal().sleep


async def offsets(share: int, spread: float, make: Callable[[], Sleeper]) -> tuple[float, float]:
    """CPU seconds until ``share`` offsets drawn from 0-``spread`` s all ended, and the longest
    gap the 10 ms ticker saw."""
    sleep = make()
    draw = random.Random(share).uniform
    longest = 0.0

    async def ticker() -> None:
        nonlocal longest
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            longest, last = max(longest, now - last - 0.01), now

    watching = asyncio.create_task(ticker())
    started = time.process_time()
    await asyncio.gather(*(sleep(draw(0.0, spread)) for _ in range(share)))
    cpu = time.process_time() - started
    watching.cancel()
    return cpu, longest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shares", default="12500,25000,50000,100000")
    parser.add_argument("--spread", type=float, default=6.0)
    args = parser.parse_args()
    print(f"{'share':>8} {'way':>7} {'cpu s':>7} {'stall s':>8}   event/signal: cpu  stall")
    for share in map(int, args.shares.split(",")):
        before = uvloop.run(offsets(share, args.spread, event_sleeper))
        after = uvloop.run(offsets(share, args.spread, signal_sleeper))
        print(f"{share:>8} {'event':>7} {before[0]:>7.2f} {before[1]:>8.2f}")
        print(
            f"{share:>8} {'signal':>7} {after[0]:>7.2f} {after[1]:>8.2f}"
            f"   {before[0] / after[0]:>15.1f}x {before[1] / max(after[1], 1e-3):>5.1f}x"
        )


if __name__ == "__main__":
    main()

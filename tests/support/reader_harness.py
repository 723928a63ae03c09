"""One long-lived Redis reader of the daemon, alone in a process, for fault tests (issue 48).

``python -m tests.support.reader_harness READER REDIS_URL`` runs READER (``cycle_ends``: the
cycle-end subscription; ``picture``: the web view's fleet picture, which holds one; ``roster``: the
replica roster's announcements) on the daemon's own event loop (uvloop) and client, and writes
JSON lines to stdout: a ``beat`` every ``BEAT`` seconds from a task of the same loop (a loop held
by the reader beats no more), and what the reader delivered (``ended`` names, the ``picture``'s
last cycle id of ``harness-m``). SIGTERM ends it. The test runs it inside a network namespace of
its own, so a black hole touches nothing else.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time

import uvloop

from playguard_async import __version__
from playguard_async.coordination.client import connect_redis
from playguard_async.coordination.marquee_reads import read_story
from playguard_async.coordination.records import CycleRecords, follow_cycle_ends
from playguard_async.coordination.replicas import ReplicaRoster
from playguard_async.kits.aio import StopSignal
from playguard_async.web.fleet_picture import FleetPicture, Listed

BEAT = 0.1
MARQUEE = "harness-m"
"""The one Marquee the picture lists."""
REPLICA = "harness"
"""The roster's member."""
KEEPALIVE = 2.0
"""Short, so that a black hole of a few seconds ends a connection with ETIMEDOUT."""


def say(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "t": time.monotonic(), **fields}), flush=True)


async def beat(stop: asyncio.Event) -> None:
    while not stop.is_set():
        await asyncio.sleep(BEAT)
        say("beat")


async def cycle_ends(url: str, stop: asyncio.Event) -> None:
    redis = connect_redis(url, socket_timeout=1.0, connect_timeout=1.0, keepalive=KEEPALIVE)
    await follow_cycle_ends(
        redis, lambda name: say("ended", name=name), lambda: say("resumed"), stop
    )


async def picture(url: str, stop: asyncio.Event) -> None:
    redis = connect_redis(url, socket_timeout=1.0, connect_timeout=1.0, keepalive=KEEPALIVE)
    records = CycleRecords(redis, history_length=5, timeout=1.0)
    shown = FleetPicture(
        records,
        lambda: [Listed(MARQUEE)],
        interval=30.0,
        tell_story=lambda name: read_story(records, name, limit=5),
        publish_interval=0.2,
    )
    watcher = asyncio.ensure_future(watch(shown, stop))
    try:
        await shown.run(stop)
    finally:
        watcher.cancel()


async def watch(shown: FleetPicture, stop: asyncio.Event) -> None:
    version = shown.version
    while not stop.is_set():
        version = await shown.changed(version, stop)
        status = shown.statuses.get(MARQUEE)
        last = None if status is None or status.last is None else status.last.cycle
        say("picture", cycle=last, error=shown.error)


async def roster(url: str, stop: asyncio.Event) -> None:
    redis = connect_redis(url, socket_timeout=1.0, connect_timeout=1.0, keepalive=KEEPALIVE)
    stopping = StopSignal()
    asyncio.ensure_future(stop.wait()).add_done_callback(lambda _: stopping.set())
    await ReplicaRoster(redis, REPLICA, ttl=3.0, timeout=1.0, version=__version__).keep_announcing(
        stopping
    )


READERS = {"cycle_ends": cycle_ends, "picture": picture, "roster": roster}


async def main(reader: str, url: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    beating = asyncio.ensure_future(beat(stop))
    say("started", reader=reader)
    try:
        await READERS[reader](url, stop)
    finally:
        beating.cancel()


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1], sys.argv[2]))

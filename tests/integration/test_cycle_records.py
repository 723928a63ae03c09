"""Cycle records in the lab's Redis: the last one per Marquee and a capped history."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from redis.asyncio import Redis

from playguard_async.coordination.keys import (
    CYCLE_ENDED_CHANNEL,
    cycle_history_key,
    last_cycle_key,
)
from playguard_async.coordination.records import CycleRecords
from playguard_async.web.fleet_picture import FleetPicture, Listed
from tests.support.fencing import eventually

pytestmark = pytest.mark.integration


async def test_history_is_capped_and_newest_first(redis: Redis) -> None:
    records = CycleRecords(redis, history_length=3, timeout=1.0)
    for number in range(7):
        await records.record("edge-1", {"cycle": number, "outcome": "ok"})
    assert [r["cycle"] for r in await records.history("edge-1")] == [6, 5, 4]
    assert await records.last("edge-1") == {"cycle": 6, "outcome": "ok"}
    assert await records.last("edge-2") is None
    assert await records.history("edge-2") == []


async def test_history_is_trimmed_to_its_bytes_keeping_the_newest_whole(redis: Redis) -> None:
    records = CycleRecords(
        redis, history_length=50, timeout=1.0, history_max_bytes=2_048, record_max_bytes=1_024
    )
    for number in range(12):
        await records.record("edge-1", {"cycle": number, "outcome": "ok", "pad": "x" * 450})
    stored = await redis.lrange(cycle_history_key("edge-1"), 0, -1)
    assert sum(map(len, stored)) <= 2_048
    assert [r["cycle"] for r in await records.history("edge-1")] == [11, 10, 9, 8]

    await records.record("edge-1", {"cycle": 12, "outcome": "ok", "pad": "y" * 3_000})
    newest = (await records.history("edge-1"))[0]
    assert (newest["cycle"], newest["outcome"]) == (12, "ok"), "cut to its own bound, kept"
    assert "pad" not in newest
    assert len(await redis.get(last_cycle_key("edge-1")) or b"") <= 1_024


async def test_the_newest_record_stays_even_when_it_alone_is_over_the_history_bound(
    redis: Redis,
) -> None:
    records = CycleRecords(
        redis, history_length=50, timeout=1.0, history_max_bytes=1_024, record_max_bytes=4_096
    )
    for number in range(3):
        await records.record("edge-1", {"cycle": number, "outcome": "ok", "pad": "x" * 2_000})
    assert [r["cycle"] for r in await records.history("edge-1")] == [2]


async def test_a_record_written_again_after_redis_took_it_is_kept_once(redis: Redis) -> None:
    """A write that timed out after Redis applied it comes again with the next record (the
    client cannot tell it was taken): the history holds it once, in its place."""
    records = CycleRecords(redis, history_length=5, timeout=1.0)
    await records.record("edge-1", {"cycle": 1, "outcome": "ok"})
    taken_unknowingly = json.dumps({"cycle": 2, "outcome": "lock_lost"}, separators=(",", ":"))
    await records.record_batch("edge-1", [taken_unknowingly])

    await records.record_batch(
        "edge-1", [taken_unknowingly, json.dumps({"cycle": 3, "outcome": "ok"})]
    )

    assert [r["cycle"] for r in await records.history("edge-1")] == [3, 2, 1]
    assert (await records.last("edge-1") or {})["cycle"] == 3


async def test_every_replicas_picture_reads_a_marquee_again_when_any_replica_records_it(
    redis: Redis,
) -> None:
    """Another replica's cycle (its own CycleRecords) shows in this replica's picture at once,
    through the name the record script publishes, not at the next whole read (an hour away); a
    flood of names nobody recorded changes nothing."""
    stop = asyncio.Event()
    picture = FleetPicture(
        CycleRecords(redis, history_length=5, timeout=1.0),
        lambda: [Listed("m1")],
        interval=3600.0,
        tell_story=lambda name: asyncio.sleep(0, None),  # type: ignore[arg-type]
        publish_interval=1.0,
    )
    running = asyncio.ensure_future(picture.run(stop))
    try:
        await eventually(lambda: picture.version >= 1, timeout=5, what="the first whole read")
        while not (await redis.pubsub_numsub(CYCLE_ENDED_CHANNEL))[0][1]:  # noqa: ASYNC110 - another connection subscribes
            await asyncio.sleep(0.02)
        for garbage in (b"\x00" * 10_000, b"\xff\xfe", b"no-such-marquee", b""):
            await redis.publish(CYCLE_ENDED_CHANNEL, garbage)
        other_replica = CycleRecords(redis, history_length=5, timeout=1.0)
        recorded = time.monotonic()
        await other_replica.record("m1", {"cycle": "abc", "outcome": "ok", "replica": "r2"})

        def shown() -> bool:
            status = picture.statuses.get("m1")
            return status is not None and status.last is not None

        await eventually(shown, timeout=2, what="the other replica's cycle")
        assert time.monotonic() - recorded < 2
        assert picture.error is None
    finally:
        stop.set()
        await running

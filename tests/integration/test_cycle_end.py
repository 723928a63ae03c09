"""A cycle's Redis traffic against the lab's real redis-server: one round trip to acquire, one per
phase boundary, one that releases, records and clears the resume entry together; and what the
ending reports when part or all of that round trip fails."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.coordination.keys import RESUME_KEY, cycle_history_key, marquee_lock_key
from playguard_async.coordination.lock import ReleaseResult
from playguard_async.coordination.records import CycleRecords
from playguard_async.engine.results import Outcome
from playguard_lab import RedisServer
from tests.integration.test_engine_observer import Recorder
from tests.support.engine import EngineHarness, ScriptedPhase
from tests.support.fencing import eventually

pytestmark = pytest.mark.integration


async def server_counts(redis: Redis) -> tuple[int, dict[str, int]]:
    """Redis's own count of reads from clients (a pipelined batch is one) and its calls per
    command, both server-wide."""
    info = await redis.info("all")
    calls = {
        name.removeprefix("cmdstat_"): int(stats["calls"])
        for name, stats in info.items()
        if name.startswith("cmdstat_")
    }
    return int(info["total_reads_processed"]), calls


async def test_an_in_sync_cycle_makes_one_round_trip_per_lease_step_and_one_to_end(
    redis: Redis,
) -> None:
    records = CycleRecords(redis, history_length=5, timeout=1.0)
    harness = EngineHarness(redis, ScriptedPhase("first"), ScriptedPhase("second"), records=records)
    assert (await harness.cycle()).outcome is Outcome.OK  # connects and loads the scripts
    reads_before, calls_before = await server_counts(redis)
    result = await harness.cycle()
    reads_after, calls_after = await server_counts(redis)
    assert result.outcome is Outcome.OK
    # Reads: acquire, two renewals, the ending; plus the second INFO's own read.
    assert reads_after - reads_before == 1 + 2 + 1 + 1
    called = {
        name: calls_after[name] - calls_before.get(name, 0)
        for name in calls_after
        if calls_after[name] != calls_before.get(name, 0) and name != "info"
    }
    # Commandstats counts what the scripts run too: TIME (its not-after), SET, GET and INCR to
    # acquire, GET and PEXPIRE per renewal, GET and DEL to release, SET, LPOS, LPUSH, LRANGE and
    # LTRIM to record, PUBLISH to tell the web views. The channel's own TIME went out with the
    # first cycle, well under 0.5 s ago. The Marquee's pause is a GET inside the acquiring and
    # each renewing script; the fleet's was read by the first cycle, under
    # fleet_pause_read_interval (1 s) ago, so none is sent.
    assert called == {
        "evalsha": 1 + 2 + 1 + 1,
        "time": 1,
        "set": 1 + 1,
        "get": (1 + 1) + 2 * (1 + 1) + 1,
        "incr": 1,
        "pexpire": 2,
        "del": 1,
        "lpos": 1,
        "lpush": 1,
        "publish": 1,
        "lrange": 1,
        "ltrim": 1,
        "zrem": 1,
    }
    assert await redis.exists(marquee_lock_key("m1")) == 0
    assert (await records.last("m1") or {})["cycle"] == result.cycle_id
    assert records.unwritten("m1") == 0


async def test_an_ending_redis_does_not_answer_is_unknown_not_released_and_the_record_kept(
    redis: Redis, redis_server: RedisServer
) -> None:
    class PausingRecords(CycleRecords):
        """Pauses the server just before the ending's round trip goes out."""

        def pending(self, marquee: str, record: Mapping[str, Any]) -> list[str]:
            redis_server.pause()
            return super().pending(marquee, record)

    records = PausingRecords(redis, history_length=5, timeout=0.3)
    recorder = Recorder()
    harness = EngineHarness(redis, ScriptedPhase("first"), records=records, observer=recorder)
    try:
        with capture_logs() as logs:
            result = await harness.cycle()
    finally:
        redis_server.resume()
    assert result.outcome is Outcome.OK, "the phases' work stands; only its ending is unknown"
    assert recorder.heard[-1] == ("released", ReleaseResult.UNKNOWN)
    events = [line["event"] for line in logs]
    assert "cycle.record_failed" in events
    assert "resume.write_failed" in events
    [finished] = [line for line in logs if line["event"] == "cycle.finished"]
    assert finished["outcome"] == "ok"
    assert records.unwritten("m1") == 1


class RefusedRecords(CycleRecords):
    """Records whose write Redis answers with an error (a history of another type no longer
    makes one: the record script replaces it)."""

    def write_command(self, marquee: str, batch: list[str]) -> tuple[str | int, ...]:
        return ("EVAL", "return redis.error_reply('ERR refused')", 0)


async def test_a_record_redis_refuses_leaves_the_release_and_resume_done(redis: Redis) -> None:
    await redis.zadd(RESUME_KEY, {"m1": 1.0})
    records = RefusedRecords(redis, history_length=5, timeout=1.0)
    recorder = Recorder()
    harness = EngineHarness(redis, ScriptedPhase("first"), records=records, observer=recorder)
    with capture_logs() as logs:
        result = await harness.cycle()
    assert result.outcome is Outcome.OK
    [failed] = [line for line in logs if line["event"] == "cycle.record_failed"]
    assert "refused" in failed["error"]
    assert recorder.heard[-1] == ("released", ReleaseResult.RELEASED)
    assert await redis.exists(marquee_lock_key("m1")) == 0
    assert await redis.zrange(RESUME_KEY, 0, -1) == []
    assert records.unwritten("m1") == 1, "kept for the next write"


async def test_a_release_script_redis_lost_is_sent_again_whole(redis: Redis) -> None:
    async def forget_scripts(ctx: Any) -> None:
        await redis.script_flush()

    recorder = Recorder()
    harness = EngineHarness(redis, ScriptedPhase("first", forget_scripts), observer=recorder)
    assert (await harness.cycle()).outcome is Outcome.OK
    assert recorder.heard[-1] == ("released", ReleaseResult.RELEASED)
    assert await redis.exists(marquee_lock_key("m1")) == 0


async def test_a_cycle_cancelled_again_in_its_ending_ends_at_once_and_its_ending_still_lands(
    redis: Redis, redis_server: RedisServer
) -> None:
    """A second stop request cancels the cycle in its phase; its ending goes out to a paused
    server, and a third cancel arrives while it waits for the answers. The cycle's task ends at
    once, and once the server answers the ending is judged all the same: the lease released,
    the cycle recorded exactly once, the Marquee owed a resume, the observer told."""
    entered, ending_sent = asyncio.Event(), asyncio.Event()

    async def hang(ctx: Any) -> None:
        entered.set()
        await asyncio.sleep(60)

    class Signalling(CycleRecords):
        def pending(self, marquee: str, record: Mapping[str, Any]) -> list[str]:
            redis_server.pause()
            ending_sent.set()
            return super().pending(marquee, record)

    records = Signalling(redis, history_length=5, timeout=3.0)
    recorder = Recorder()
    harness = EngineHarness(
        redis, ScriptedPhase("first", hang), records=records, observer=recorder,
        redis_socket_timeout=3.0,
    )  # fmt: skip
    [task] = await harness.engine.tick()
    await entered.wait()
    try:
        harness.engine.request_stop()
        harness.engine.request_stop()  # cancels the phase; the ending goes out
        await ending_sent.wait()
        task.cancel()  # while the ending waits for a server that does not answer
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < 0.5, "the cancellation propagates at once"
        assert ("released", ReleaseResult.RELEASED) not in recorder.heard
    finally:
        redis_server.resume()
    await eventually(
        lambda: ("released", ReleaseResult.RELEASED) in recorder.heard,
        timeout=2,
        what="the ending judged after the server answered",
    )
    assert await redis.exists(marquee_lock_key("m1")) == 0
    assert await redis.zrange(RESUME_KEY, 0, -1) == [b"m1"]
    [recorded] = await redis.lrange(cycle_history_key("m1"), 0, -1)
    assert json.loads(recorded)["outcome"] == "interrupted"
    assert records.unwritten("m1") == 0, "taken, so not written again with the next record"
